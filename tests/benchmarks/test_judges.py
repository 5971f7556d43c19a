"""Judges: ``exact``, ``llm`` (against the local stub server) and ``replay`` (docs/benchmarks.md)."""

from __future__ import annotations

import json
import logging

import pytest

from benchmarks.base import BenchmarkDataError, BenchmarkDataMissing, default_data_dir, sha256_text
from benchmarks.judges import (SYSTEM_PROMPT, JudgeConfigError, JudgeRequest, LLMJudge, get_judge, list_judges,
                               parse_verdict)
from benchmarks.registry import get_benchmark
from tests.support.judge_stub import Delay, JudgeStub, Reply

REQ = JudgeRequest(benchmark="webwalkerqa", task_id="7", question="Who chaired ICSE 2002?",
                   gold="Michal Young and Jeff Magee", prediction="Jeff Magee and Michal Young",
                   rule="webwalkerqa")


@pytest.fixture
def stub():
    with JudgeStub() as server:
        yield server


def llm(stub, tmp_path, **options):
    sleeps = []
    options = {"base_url": stub.base_url, "model": "judge-model", "api_key_env": None,
               "cache_dir": tmp_path / "cache", "backoff_s": 0.5, "sleep": sleeps.append, **options}
    judge = get_judge("llm", **options)
    judge.sleeps = sleeps
    return judge


def test_registered_judges():
    assert set(list_judges()) >= {"exact", "llm", "replay"}
    with pytest.raises(JudgeConfigError, match="exact, llm, replay"):
        get_judge("oracle")


def test_exact_judge():
    judge = get_judge("exact")
    assert judge.judge(REQ).correct is False
    verdict = judge.judge(JudgeRequest("b", "1", "q", "1,000", " 1000.0 "))
    assert verdict.correct and verdict.judge == "exact" and verdict.verdict == "match"


# -- parse --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reply,expected", [
    ("最终答案: 北京\n结论: 正确", True),
    ("最终答案: 上海\n结论：错误", False),
    ("The answer matches.\nGRADE: CORRECT", True),
    ("GRADE: INCORRECT", False),
    ('{"verdict": "correct"}', True),
    ('Sure! {"verdict": "incorrect"}', False),
    ('{"correct": true}', True),
    ("<think>结论: 错误? no wait</think>结论: 正确", True),
    ("GRADE: CORRECT ... on reflection GRADE: INCORRECT", False),  # the last verdict wins
    ("I think it is probably right", None),
    ('{"verdict": "maybe"}', None),
    ("", None),
    (None, None),
])
def test_parse_verdict(reply, expected):
    assert parse_verdict(reply) is expected


# -- llm judge against the stub ------------------------------------------------------------------------
def test_correct_and_incorrect_verdicts(stub, tmp_path):
    stub.script = ["Both chairs are named.\nGRADE: CORRECT", "GRADE: INCORRECT"]
    judge = llm(stub, tmp_path)
    first = judge.judge(REQ)
    assert (first.correct, first.judge, first.verdict, first.error) == (True, "llm", "correct", None)
    second = judge.judge(JudgeRequest(**{**REQ.__dict__, "prediction": "Jeff Magee"}))
    assert (second.correct, second.verdict) == (False, "incorrect")
    body = stub.requests[0]
    assert body["model"] == "judge-model" and body["temperature"] == 0
    prompt = body["messages"][-1]["content"]
    assert "GRADE: CORRECT or GRADE: INCORRECT" in prompt and REQ.gold in prompt and REQ.prediction in prompt


@pytest.mark.parametrize("reply,label", [("lorem ipsum dolor", "garbage"), ("", "empty"), (None, "empty"),
                                         ("   \n", "empty")])
def test_garbage_and_empty_count_incorrect_and_are_flagged(stub, tmp_path, reply, label):
    stub.script = [reply]
    verdict = llm(stub, tmp_path).judge(REQ)
    assert verdict.correct is False and verdict.verdict == label and verdict.error
    assert "incorrect" in verdict.error


def test_garbage_reply_of_sensitive_request_is_not_quoted(stub, tmp_path):
    stub.script = ["the answer is 北京 I guess"]
    verdict = llm(stub, tmp_path).judge(JudgeRequest(**{**REQ.__dict__, "sensitive": True, "rule": "xbench"}))
    assert verdict.verdict == "garbage" and "北京" not in verdict.error and "sha256" in verdict.error


def test_500_then_success_is_retried_with_backoff(stub, tmp_path):
    stub.script = [Reply(500, "overloaded"), Reply(503, ""), Reply(429, "slow down"), "结论: 正确"]
    judge = llm(stub, tmp_path)
    verdict = judge.judge(REQ)
    assert verdict.correct and stub.count == 4
    assert judge.sleeps == [0.5, 1.0, 2.0]  # exponential


def test_backoff_is_capped(stub, tmp_path):
    stub.script = [Reply(500)] * 4 + ["结论: 正确"]
    judge = llm(stub, tmp_path, backoff_s=10, max_backoff_s=15, max_retries=4)
    assert judge.judge(REQ).correct and judge.sleeps == [10, 15, 15, 15]


def test_persistent_5xx_gives_up_and_is_not_cached(stub, tmp_path):
    stub.default = Reply(502, "bad gateway")
    judge = llm(stub, tmp_path, max_retries=2)
    verdict = judge.judge(REQ)
    assert (verdict.correct, verdict.verdict) == (False, "judge_failed")
    assert "HTTP 502" in verdict.error and "3 attempts" in verdict.error and stub.count == 3
    stub.default = "结论: 正确"
    assert judge.judge(REQ).correct and stub.count == 4  # the failure was not cached


def test_client_error_is_not_retried(stub, tmp_path):
    stub.script = [Reply(400, "bad request")]
    verdict = llm(stub, tmp_path).judge(REQ)
    assert verdict.verdict == "judge_failed" and "HTTP 400" in verdict.error and stub.count == 1


def test_timeout_is_retried(stub, tmp_path):
    stub.script = [Delay(1.0, "结论: 错误"), "结论: 正确"]
    judge = llm(stub, tmp_path, timeout_s=0.2)
    verdict = judge.judge(REQ)
    assert verdict.correct and stub.count == 2 and len(judge.sleeps) == 1


def test_malformed_response_body(stub, tmp_path):
    stub.script = [Reply(200, "<html>not json</html>")]
    verdict = llm(stub, tmp_path).judge(REQ)
    assert verdict.verdict == "judge_failed" and "malformed" in verdict.error


def test_cache_hit_on_second_call_and_key_includes_model(stub, tmp_path):
    stub.default = "GRADE: CORRECT"
    judge = llm(stub, tmp_path)
    assert judge.judge(REQ).correct and stub.count == 1
    again = judge.judge(REQ)
    assert again.correct and again.verdict == "correct" and stub.count == 1
    fresh = llm(stub, tmp_path)  # a new process/judge reads the same disk cache
    assert fresh.judge(REQ).correct and stub.count == 1
    other_model = llm(stub, tmp_path, model="another-judge")
    other_model.judge(REQ)
    assert stub.count == 2
    files = list((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 2
    key = judge.cache_key(judge.prompt(REQ))
    assert key == sha256_text("judge-model\n" + SYSTEM_PROMPT + "\n" + judge.prompt(REQ))
    assert (tmp_path / "cache" / key[:2] / f"{key}.json").is_file()


def test_garbage_verdicts_are_cached_too(stub, tmp_path):
    stub.script = ["???"]
    judge = llm(stub, tmp_path)
    assert judge.judge(REQ).verdict == "garbage"
    assert judge.judge(REQ).verdict == "garbage" and stub.count == 1


def test_cache_holds_no_text(stub, tmp_path):
    stub.default = "最终答案: 北京\n结论: 正确"
    request = JudgeRequest("xbench_deepsearch", "1", "中国的首都是哪里?", "北京", "北京市", rule="xbench", sensitive=True)
    llm(stub, tmp_path).judge(request)
    (path,) = list((tmp_path / "cache").rglob("*.json"))
    entry = json.loads(path.read_text(encoding="utf-8"))
    assert set(entry) == {"schema", "key", "correct", "verdict", "error"}
    raw = path.read_bytes()
    for text in ("北京", "首都", json.dumps("北京")[1:-1]):
        assert text.encode() not in raw
    assert "结论: 正确 或 结论: 错误" in stub.prompts()[0]


def test_corrupt_cache_entry_is_ignored(stub, tmp_path, caplog):
    stub.default = "GRADE: CORRECT"
    judge = llm(stub, tmp_path)
    judge.judge(REQ)
    (path,) = list((tmp_path / "cache").rglob("*.json"))
    path.write_text("{broken")
    with caplog.at_level(logging.WARNING):
        assert judge.judge(REQ).correct
    assert stub.count == 2 and "unreadable judge cache entry" in caplog.text


def test_api_key_from_env_is_sent_but_never_stored(stub, tmp_path, monkeypatch, caplog):
    secret = "sk-test-SECRET-value-0123"
    monkeypatch.setenv("MY_JUDGE_KEY", secret)
    stub.script = [Reply(500, "x"), "GRADE: CORRECT"]
    caplog.set_level(logging.DEBUG)
    judge = llm(stub, tmp_path, api_key_env="MY_JUDGE_KEY")
    verdict = judge.judge(REQ)
    assert verdict.correct
    assert stub.headers[-1]["Authorization"] == f"Bearer {secret}"
    assert secret not in repr(judge) and secret not in caplog.text and secret not in repr(verdict)
    assert all(secret.encode() not in p.read_bytes() for p in (tmp_path / "cache").rglob("*") if p.is_file())


def test_unauthorized_names_the_variable_not_the_key(stub, tmp_path, monkeypatch):
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-wrong")
    stub.script = [Reply(401, "invalid key sk-wrong")]
    verdict = llm(stub, tmp_path, api_key_env="MY_JUDGE_KEY").judge(REQ)
    assert "HTTP 401" in verdict.error and "$MY_JUDGE_KEY" in verdict.error and "sk-wrong" not in verdict.error


@pytest.mark.parametrize("options,problem", [
    ({"model": "m", "api_key_env": None}, "base_url"),
    ({"base_url": "http://127.0.0.1:9/v1", "api_key_env": None}, "model"),
    ({"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "UNSET_JUDGE_KEY_VAR"}, "UNSET_JUDGE_KEY_VAR"),
])
def test_config_errors(monkeypatch, options, problem):
    for var in ("MGRPO_JUDGE_BASE_URL", "MGRPO_JUDGE_MODEL", "UNSET_JUDGE_KEY_VAR"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(JudgeConfigError, match=problem):
        get_judge("llm", **options)


def test_config_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("MGRPO_JUDGE_BASE_URL", "http://127.0.0.1:9/v1/")
    monkeypatch.setenv("MGRPO_JUDGE_MODEL", "env-model")
    monkeypatch.setenv("MGRPO_JUDGE_API_KEY", "k")
    monkeypatch.setenv("MGRPO_JUDGE_CACHE_DIR", str(tmp_path / "c"))
    judge = get_judge("llm")
    assert isinstance(judge, LLMJudge)
    assert (judge.base_url, judge.model, judge.cache_dir) == ("http://127.0.0.1:9/v1", "env-model", tmp_path / "c")


# -- benchmarks with a judge -----------------------------------------------------------------------------
def test_benchmark_consults_judge_only_after_exact_fails(stub, tmp_path):
    stub.default = "GRADE: CORRECT"
    options = {"base_url": stub.base_url, "model": "m", "api_key_env": None, "cache_dir": tmp_path}
    bench = get_benchmark("webwalkerqa", judge="llm", judge_options=options)
    task = bench.load(split="sample24", limit=1)[0]
    assert bench.score(task, task.gold).judge == "exact" and stub.count == 0
    verdict = bench.score(task, "a paraphrase of the answer")
    assert (verdict.correct, verdict.judge) == (True, "llm") and stub.count == 1
    assert "GRADE:" in stub.prompts()[0]
    assert bench.score(task, None).correct is False and stub.count == 1


def test_gaia_default_is_official_scorer_only(stub, tmp_path):
    data = default_data_dir() / "gaia"
    common = {"snapshot": data / "synthetic_gaia_validation.jsonl", "attachments_dir": data / "synthetic_attachments"}
    task = get_benchmark("gaia", **common).load(limit=1)[0]
    assert get_benchmark("gaia", **common).score(task, "fifty-one").verdict == "no_match"
    stub.default = '{"verdict": "correct"}'
    judged = get_benchmark("gaia", judge="llm", judge_options={"base_url": stub.base_url, "model": "m",
                                                                "api_key_env": None, "cache_dir": tmp_path}, **common)
    verdict = judged.score(task, "fifty-one")
    assert verdict.judge == "llm" and verdict.correct and "GAIA's rule" in stub.prompts()[0]


# -- replay ---------------------------------------------------------------------------------------------
def test_replay_by_benchmark_task_and_prediction_hash(tmp_path):
    records = tmp_path / "eval.jsonl"
    rows = [
        {"benchmark": "webwalkerqa", "task_id": "7", "prediction": REQ.prediction, "correct": True,
         "judge": "llm", "verdict": "correct", "error": None},
        {"benchmark": "webwalkerqa", "task_id": "7", "prediction": "nope", "correct": False, "verdict": "incorrect"},
        {"benchmark": "xbench_deepsearch", "task_id": "1", "prediction": "sha256:" + sha256_text("北京"),
         "correct": True, "verdict": "correct"},
    ]
    records.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows) + "\n", encoding="utf-8")
    judge = get_judge("replay", records=records)
    assert len(judge) == 3
    hit = judge.judge(REQ)
    assert (hit.correct, hit.judge, hit.verdict) == (True, "replay", "correct")
    assert judge.judge(JudgeRequest(**{**REQ.__dict__, "prediction": "nope"})).correct is False
    miss = judge.judge(JudgeRequest(**{**REQ.__dict__, "prediction": "unseen"}))
    assert (miss.correct, miss.verdict) == (False, "missing") and "webwalkerqa/7" in miss.error
    other_task = judge.judge(JudgeRequest(**{**REQ.__dict__, "task_id": "8"}))
    assert other_task.verdict == "missing"
    xb = judge.judge(JudgeRequest("xbench_deepsearch", "1", "q", "g", "北京", rule="xbench", sensitive=True))
    assert xb.correct


def test_replay_round_trip_through_record_fields(tmp_path):
    bench = get_benchmark("xbench_deepsearch", csv_path=default_data_dir() / "xbench" / "synthetic_deepsearch_sample.csv")
    task = bench.load(limit=1)[0]
    record = {"benchmark": bench.name, "task_id": task.task_id, "correct": True, "verdict": "correct",
              **bench.record_fields(task, "a prediction")}
    replayed = get_benchmark("xbench_deepsearch", csv_path=bench.csv_path, judge="replay",
                             judge_options={"records": [record]})
    assert replayed.score(task, "a prediction").judge == "replay"
    assert replayed.score(task, "a prediction").correct
    assert replayed.score(task, "another prediction").verdict == "missing"


def test_replay_bad_files(tmp_path):
    bad = tmp_path / "r.jsonl"
    bad.write_text('{"benchmark": "b", "task_id": "1", "prediction": "p", "correct": true}\n{oops\n')
    with pytest.raises(BenchmarkDataError, match=r"r\.jsonl:2: not valid JSON"):
        get_judge("replay", records=bad)
    bad.write_text('{"benchmark": "b", "prediction": "p"}\n')
    with pytest.raises(BenchmarkDataError, match=r"r\.jsonl:1: task record lacks task_id, correct"):
        get_judge("replay", records=bad)
    with pytest.raises(BenchmarkDataMissing, match="not found"):
        get_judge("replay", records=tmp_path / "none.jsonl")
    with pytest.raises(JudgeConfigError, match="records"):
        get_judge("replay")
