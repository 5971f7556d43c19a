"""The real benchmarks end to end on a stand-in for the internet (docs/evaluation.md §Real benchmarks on the web).

``pytest benchmarks/ --web searxng --search-endpoint URL`` runs exactly as a user runs it (a subprocess),
against :class:`tests.support.web_standin.WebStandIn` on 127.0.0.1: a server that speaks SearXNG's JSON API
(and a keyed JSON API) and serves the pages its results point at, browsed by real Chromium, page text by the
``web`` extractor. The benchmark data are written here in each benchmark's own format (a GAIA snapshot with
an attachment, an encrypted XBench CSV, WebWalkerQA rows whose ``root_url`` is a served site). No test
reaches the internet: the browser may open the stand-in's host only because ``--web-allow-host`` names it.

One suite session of the scripted reader (``--trainer expert``) over the three real benchmarks and
``local_gaia`` is checked per benchmark: records, scorer verdicts, the table, tasks whose web is unreachable (a
site that does not answer, a search API that fails) counted as errors; then the report shows real and local benchmarks side by side. A tiny model answers
through the model runner; a keyed API's key never reaches output or disk; bad input stops before any task.
"""

from __future__ import annotations

import csv
import io
import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks.runners import task_seed
from benchmarks.xbench import COLUMNS, xor_encrypt
from harness.records import read_tasks
from tests.benchmarks.test_eval_suite import REPO, run_suite, table
from tests.support.web_standin import WebStandIn, page

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("realweb")]

CANARY = "BENCHMARK DATA SHOULD NEVER APPEAR AS PLAIN TEXT ONLINE. canary GUID xbench-DeepSearch:standin"
GAIA_IDS = [f"00000000-0000-4000-8000-00000000000{i}" for i in (1, 2, 3)]
PAGES = {
    "wiki/zorvath-bridge.html": page("Zorvath Bridge", "The Zorvath Bridge is a bridge over the Kell river.",
                                     "The Zorvath Bridge was completed in 1911."),
    "wiki/veloria.html": page("Veloria", "Veloria is a small country in the north.",
                              "The capital city of Veloria is Marlen."),
    "site/index.html": page("Tarsil Society", "Welcome to the Tarsil Society.",
                            nav=(("About us", "about.html"), ("Tarsil Conference 2026", "conf2026.html"))),
    "site/about.html": page("About the Tarsil Society", "The society was founded by scholars in Ostwald."),
    "site/conf2026.html": page("Tarsil Conference 2026", "The Tarsil Conference 2026 will be held in Ostmark."),
}


def free_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_data(root: Path, standin: WebStandIn, dead_host: str) -> tuple[Path, Path]:
    """The three benchmarks' files under ``root``: ``(data_dir, gaia snapshot)``."""
    snap = root / "gaia-snapshot"
    val = snap / "2023" / "validation"
    val.mkdir(parents=True)
    (val / "pets.txt").write_text("Notes from the shelter.\nThe name of the cat is Miso.\n")
    rows = [  # the task with an attachment first: the model runner's session takes the first task of each
        {"task_id": GAIA_IDS[1], "Question": "What is the name of the cat in the attached file?", "Level": 1,
         "Final answer": "Miso", "file_name": "pets.txt", "file_path": "pets.txt"},
        {"task_id": GAIA_IDS[0], "Question": "In which year was the Zorvath Bridge completed?", "Level": 1,
         "Final answer": "1911", "file_name": ""},
        {"task_id": GAIA_IDS[2], "Question": "Who designed the Quellstone Tower?", "Level": 2,
         "Final answer": "Ada Brin", "file_name": ""},
    ]
    (val / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = root / "data"
    (data / "xbench").mkdir(parents=True)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(COLUMNS)
    for i, (q, a) in enumerate([("What is the capital city of Veloria?", "Marlen"),
                                ("How many moons does Kestrel Prime have?", "7")], 1):
        writer.writerow([str(i), xor_encrypt(q, CANARY), xor_encrypt(a, CANARY), xor_encrypt("search", CANARY), CANARY])
    (data / "xbench" / "DeepSearch-2505.csv").write_text(buf.getvalue())
    (data / "webwalkerqa").mkdir()
    info = {"domain": "conference", "lang": "en", "source_website": [], "golden_path": [], "type": "single_source",
            "difficulty_level": "easy"}
    ww = [{"question": "In which city will the Tarsil Conference 2026 be held?", "answer": "Ostmark",
           "root_url": standin.url("site/index.html"), "info": info},
          {"question": "Who founded the Brask Institute?", "answer": "Lena Brask",
           "root_url": f"http://{dead_host}/index.html", "info": {**info, "difficulty_level": "medium"}}]
    (data / "webwalkerqa" / "webwalkerqa_main.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ww))
    return data, snap


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    root = tmp_path_factory.mktemp("realweb")
    with WebStandIn(PAGES, api_key="sk-standin-7f3a9c2e41", fail_words=("Kestrel",)) as standin:
        dead = f"127.0.0.1:{free_port()}"
        data, snap = write_data(root, standin, dead)
        common = ["--web", "searxng", "--search-endpoint", standin.base_url, "--web-allow-host", standin.host,
                  "--web-allow-host", dead, "--data-dir", str(data), "--benchmark-disable"]
        yield SimpleNamespace(root=root, standin=standin, data=data, snap=snap, dead=dead, common=common,
                              env={"MGRPO_GAIA_SNAPSHOT": str(snap)})


@pytest.fixture(scope="module")
def expert_session(web):
    run = web.root / "runs" / "expert-web"
    proc = run_suite("--trainer=expert", *web.common, "--bench", "gaia,xbench_deepsearch,webwalkerqa,local_gaia",
                     "--bench-limit", "3", "--world-size", "tiny", "--run", str(run), env_extra=web.env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return SimpleNamespace(proc=proc, run=run, table=table(proc.stdout))


def recs(run: Path, bench: str):
    return {r.task_id: r for r in read_tasks(run / "eval" / "0" / f"{bench}.jsonl").records}


def agent_text(record, role: str) -> list[str]:
    return [t["text"] for t in record.transcript["turns"] if t["role"] == role]


@pytest.mark.slow
def test_gaia_answered_on_the_web_with_its_attachment(expert_session, web):
    r = recs(expert_session.run, "gaia")
    assert sorted(r) == GAIA_IDS
    found, attached, unknown = (r[i] for i in GAIA_IDS)
    assert (found.prediction, found.correct, found.judge, found.verdict) == ("1911", True, "gaia_scorer", "match")
    assert (attached.prediction, attached.correct) == ("Miso", True)
    # no page says it: no answer, scored incorrect (an input verdict, not an error of the run), not dropped
    assert (unknown.correct, unknown.prediction, unknown.verdict) == (False, None, "invalid_prediction")
    # the search went to the stand-in, the page came through Chromium and the web extractor (no boilerplate)
    assert found.extra["search"] == "searxng" and found.extra["visit_backend"] == "playwright"
    assert (found.extra["web_calls"], found.extra["web_unreachable"]) == (2, 0)
    search_obs, page_obs = agent_text(found, "tool")
    assert search_obs.startswith("[1] Zorvath Bridge\nURL: " + web.standin.url("wiki/zorvath-bridge.html"))
    assert "The Zorvath Bridge was completed in 1911." in page_obs and "We use cookies" not in page_obs
    # the attachment reached the agent as text under its name, never its path on disk
    prompt = agent_text(attached, "user")[0]
    assert "\n\nAttached file pets.txt:\nNotes from the shelter." in prompt and str(web.snap) not in prompt
    row = expert_session.table["gaia"]
    assert (row["n"], row["correct"], row["errors"]) == ("3", "2", "0")
    assert "level 1 100% (n=2), level 2 0% (n=1)" in expert_session.proc.stdout


@pytest.mark.slow
def test_xbench_answered_on_the_web_without_plain_text_on_disk(expert_session, web):
    r = recs(expert_session.run, "xbench_deepsearch")
    assert sorted(r) == ["1", "2"] and [r["1"].correct, r["2"].correct] == [True, False]
    assert r["1"].prediction.startswith("sha256:") and r["1"].transcript is None  # hashes only, no transcript
    # the search API failed on task 2's only call: an error, its detail withheld (it could quote the question)
    assert r["2"].verdict == "web_unreachable"
    assert r["2"].error == "web_unreachable: all 1 tool call(s) of the task failed to reach the web (detail withheld: " \
                           "sensitive benchmark)"
    searched = [e["query"]["q"] for e in web.standin.searches()]
    assert "What is the capital city of Veloria?" in searched  # the question was searched (in memory only)
    for path in expert_session.run.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert "Veloria" not in text and "Marlen" not in text and "Kestrel" not in text, path
    assert "Veloria" not in expert_session.proc.stdout + expert_session.proc.stderr
    row = expert_session.table["xbench_deepsearch"]
    assert (row["n"], row["correct"], row["errors"]) == ("2", "1", "1")


@pytest.mark.slow
def test_webwalkerqa_walks_from_its_root_url_and_counts_an_unreachable_site_as_an_error(expert_session, web):
    r = recs(expert_session.run, "webwalkerqa")
    walked, dead = r["0"], r["1"]
    assert (walked.prediction, walked.correct, walked.error) == ("Ostmark", True, None)
    visits = [json.loads(t[len("<tool_call>"):-len("</tool_call>")])["arguments"]["url"]
              for t in agent_text(walked, "assistant") if t.startswith("<tool_call>")]
    assert visits == [web.standin.url("site/index.html"), web.standin.url("site/conf2026.html")]  # no search
    assert (dead.correct, dead.verdict, dead.judge) == (False, "web_unreachable", None)
    assert dead.error.startswith("web_unreachable: all 1 tool call(s)") and web.dead in dead.error
    row = expert_session.table["webwalkerqa"]
    assert (row["n"], row["correct"], row["errors"]) == ("2", "1", "1")  # in the denominator, not skipped
    assert "single_source/easy 100% (n=1), single_source/medium 0% (n=1)" in expert_session.proc.stdout
    assert "XFAIL benchmarks/test_eval.py::test_task[webwalkerqa::1]" in expert_session.proc.stdout
    status = json.loads((expert_session.run / "status.json").read_text())
    assert (status["state"], status["n_records"]) == ("completed", 10)


@pytest.mark.slow
def test_report_shows_real_and_local_benchmarks_side_by_side(expert_session, tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "harness.report", "--runs", str(expert_session.run), "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {m[0]: m[1] for m in re.findall(r"^\| (\w+) \| expert \| ([\d.]+) ±", (out / "report.md").read_text(), re.M)}
    assert rows == {"gaia": "0.667", "local_gaia": "1.000", "webwalkerqa": "0.500", "xbench_deepsearch": "0.500"}
    for bench in ("gaia", "webwalkerqa", "local_gaia"):
        assert (out / f"examples-{bench}.html").is_file()


@pytest.mark.slow
def test_model_runner_answers_the_real_benchmarks(web, tmp_path):
    """The tiny model (random weights, a shipped-checkpoint folder) through the model runner: each real benchmark
    posed with its prompt, the web toolbox, two sampled inference runs per task, a verdict per run."""
    from tests.benchmarks.test_eval_suite import tiny_ship

    ship = tiny_ship(tmp_path)
    runs = tmp_path / "runs"
    proc = run_suite("--model", str(ship), "--runs-dir", str(runs), *web.common, "--bench",
                     "gaia,xbench_deepsearch,webwalkerqa", "--bench-limit", "1", "--inference-runs", "2",
                     "--temperature", "0.7", env_extra=web.env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    run = next(runs.iterdir())
    for bench, ids in (("gaia", [GAIA_IDS[1]]), ("xbench_deepsearch", ["1"]), ("webwalkerqa", ["0"])):
        got = read_tasks(run / "eval" / "0" / f"{bench}.jsonl").records
        assert sorted((r.task_id, r.inference_run) for r in got) == sorted((i, k) for i in ids for k in (0, 1))
        for r in got:
            assert r.verdict not in ("crashed", "timeout"), r.error
            # a real benchmark's runs are separate episodes: run r from seed 0 + r, hashed with the task id
            assert (r.temperature, r.sample_seed) == (0.7, task_seed(r.inference_run, r.task_id))
            assert "web_calls" in r.extra and r.trainer == "mgrpo"
        assert table(proc.stdout)[bench]["n"] == str(2 * len(ids))
    gaia = {(r.task_id, r.inference_run): r for r in read_tasks(run / "eval" / "0" / "gaia.jsonl").records}
    assert "Attached file pets.txt:" in gaia[(GAIA_IDS[1], 0)].transcript["turns"][0]["text"]
    assert "2 inference runs at temperature 0.7, accuracy per run:" in proc.stdout


@pytest.mark.slow
def test_a_keyed_search_api_works_and_its_key_never_reaches_output_or_disk(web, tmp_path):
    key = web.standin.api_key
    run = tmp_path / "run"
    keyed = ["--web", "json_api", "--search-endpoint", web.standin.url("api/search"), "--search-key-env",
             "STANDIN_SEARCH_KEY", "--search-option", "api_key_header=X-API-KEY", "--search-option",
             "results_path=organic", "--web-allow-host", web.standin.host, "--data-dir", str(web.data),
             "--benchmark-disable", "--bench", "gaia", "--bench-limit", "1", "--run", str(run)]
    proc = run_suite("--trainer=expert", *keyed, env_extra={**web.env, "STANDIN_SEARCH_KEY": key})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (rec,) = read_tasks(run / "eval" / "0" / "gaia.jsonl").records
    assert rec.correct and rec.extra["search"] == "json_api"
    assert any(e["key_header"] for e in web.standin.searches() if e["path"] == "/api/search")
    assert key not in proc.stdout + proc.stderr
    for path in run.rglob("*"):
        assert not path.is_file() or key not in path.read_text(errors="replace"), path
    # a wrong key: one message before any task, naming the variable, never the key
    proc = run_suite("--trainer=expert", *keyed[:-2], "--run", str(tmp_path / "wrong"),
                     env_extra={**web.env, "STANDIN_SEARCH_KEY": "sk-wrong-0000"})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "answered HTTP 401 (check the key in $STANDIN_SEARCH_KEY)" in out
    assert "sk-wrong-0000" not in out and not (tmp_path / "wrong" / "eval").exists()


def test_bad_input_stops_before_any_task(web, tmp_path):
    """Each problem is one message naming what is missing and how to provide it; no task runs, no record."""
    base = ["--trainer=expert", "--data-dir", str(web.data), "--run", str(tmp_path / "run")]
    cases = [
        (["--web", "json_api", "--search-endpoint", web.standin.url("api/search"), "--search-key-env", "NO_SUCH_KEY_VAR",
          "--bench", "gaia"], web.env, "environment variable NO_SUCH_KEY_VAR is not set: export the search API key"),
        (["--web", "searxng", "--search-endpoint", f"http://{web.dead}", "--bench", "gaia"], web.env,
         f"search API at http://{web.dead} failed: ConnectionError; check --search-endpoint"),
        (["--web", "searxng", "--search-endpoint", web.standin.base_url, "--bench", "gaia"],
         {"MGRPO_GAIA_SNAPSHOT": str(tmp_path / "no-snapshot")},
         f"--bench gaia: data missing: snapshot {tmp_path / 'no-snapshot'} does not exist"),
        (["--web", "searxng", "--bench", "gaia"], web.env, "--web searxng needs --search-endpoint URL"),
        (["--search-endpoint", web.standin.base_url, "--bench", "gaia"], web.env,
         "--search-endpoint without --web: add --web searxng|json_api"),
    ]
    for args, env, message in cases:
        proc = run_suite(*base, *args, env_extra=env)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and message in out, (args, out[-2000:])
        assert not (tmp_path / "run" / "eval").exists()
    broken = tmp_path / "broken"
    (broken / "webwalkerqa").mkdir(parents=True)
    good = (web.data / "webwalkerqa" / "webwalkerqa_main.jsonl").read_text()
    (broken / "webwalkerqa" / "webwalkerqa_main.jsonl").write_text(good + '{"question": "cut off\n')
    proc = run_suite("--trainer=expert", "--data-dir", str(broken), "--run", str(tmp_path / "run"), "--web", "searxng",
                     "--search-endpoint", web.standin.base_url, "--bench", "webwalkerqa")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"--bench webwalkerqa: {broken / 'webwalkerqa' / 'webwalkerqa_main.jsonl'}:3:" in out
    # without --web the real benchmarks are NOT_RUN, with the options that would run them
    proc = run_suite("--trainer=expert", "--data-dir", str(web.data), "--run", str(tmp_path / "plain"), "--bench", "gaia",
                     env_extra=web.env)
    assert proc.returncode == 0 and re.search(r"^gaia .* not run: gaia needs real-web tools: pass --web searxng",
                                              proc.stdout, re.M), proc.stdout
    assert json.loads((tmp_path / "plain" / "status.json").read_text())["state"] == "failed"
