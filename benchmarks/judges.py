"""Pluggable judges, registered by name: ``exact``, ``llm``, ``replay`` (docs/benchmarks.md).

* ``exact`` (the offline default): :func:`benchmarks.scoring.answers_match`.
* ``llm``: any OpenAI-compatible endpoint (``POST {base_url}/chat/completions``). Model name,
  base URL and the *name* of the environment variable holding the API key come from config; the
  key itself is read from the environment and never logged, cached or put in an error message.
  The prompts are our own, each applying a benchmark's published decision rule:

  - ``xbench``: xbench-evals' grader (``eval_grader.py``, LLM_JUDGE_PROMPT, MIT): extract the
    response's final answer, judge only whether it differs in substance from the reference answer
    (small numeric tolerance allowed, any ambiguity is wrong), conclude ``结论: 正确/错误``.
  - ``webwalkerqa``: WebWalker's ``evaluate.py`` uses LangChain's ``cot_qa`` evaluator: grade the
    answer CORRECT/INCORRECT on factual accuracy only, ignoring phrasing and punctuation, extra
    information allowed when it does not conflict; reason step by step, end with ``GRADE: ...``.
  - ``gaia``: GAIA is quasi-exact match (its official scorer); an llm judge is only ever asked
    after that scorer said no, for free-form answers, with the same rule stated in words.
  - ``generic``: same answer in substance; a JSON verdict.

  The reply parser accepts ``结论: 正确|错误``, ``GRADE: CORRECT|INCORRECT`` and a JSON object
  ``{"verdict": "correct"|"incorrect"}`` (the last one found wins; ``<think>`` blocks are
  ignored). An empty or unparseable reply is **incorrect**, flagged ``verdict="empty"`` /
  ``"garbage"`` with an ``error`` note, never dropped. HTTP 429/5xx, timeouts and connection
  errors are retried with exponential backoff; other 4xx are not. Verdicts are cached on disk,
  keyed by ``sha256(model + "\\n" + prompt)``; a cache entry holds the key, the verdict label,
  ``correct`` and the error note only, so no benchmark text (XBench plain text in particular)
  is ever written. Transport failures are not cached (a rerun retries them).
* ``replay``: recorded verdicts from task-record JSONL files (docs/report.md), keyed by
  ``(benchmark, task_id, sha256(prediction))``; a prediction with no recorded verdict is
  incorrect with ``verdict="missing"``.

Benchmarks call a judge only after their exact rule failed (``exact`` then means "not correct").
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, TypeVar

from benchmarks.core import (
    BenchmarkDataError, BenchmarkDataMissing, BenchmarkError, Verdict, read_jsonl, sha256_text,
)
from benchmarks.scoring import answers_match

log = logging.getLogger(__name__)


class JudgeConfigError(BenchmarkError):
    """A judge is misconfigured (missing model, URL or API key variable)."""


@dataclass(frozen=True)
class JudgeRequest:
    """What a judge sees. Text fields are hidden from ``repr``."""

    benchmark: str
    task_id: str
    question: str = field(repr=False)
    gold: str = field(repr=False)
    prediction: str = field(repr=False)
    rule: str = "generic"
    sensitive: bool = False


class Judge:
    """A judge decides whether ``request.prediction`` answers ``request.question`` like ``gold``."""

    name: ClassVar[str] = ""

    def judge(self, request: JudgeRequest) -> Verdict:
        raise NotImplementedError


_JUDGES: dict[str, type[Judge]] = {}
J = TypeVar("J", bound=type[Judge])


def register_judge(cls: J) -> J:
    """Class decorator: register a :class:`Judge` subclass under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__}.name must be set")
    _JUDGES[cls.name] = cls
    return cls


def list_judges() -> list[str]:
    return sorted(_JUDGES)


def get_judge(name: str, **options: Any) -> Judge:
    """Build the judge registered under ``name``; unknown names list the registered ones."""
    try:
        cls = _JUDGES[name]
    except KeyError:
        raise JudgeConfigError(f"unknown judge {name!r}; registered: {', '.join(list_judges())}") from None
    return cls(**options)


# --------------------------------------------------------------------------------------------
@register_judge
class ExactJudge(Judge):
    """Normalised exact match (see :mod:`benchmarks.scoring`); the offline default."""

    name = "exact"

    def judge(self, request: JudgeRequest) -> Verdict:
        ok = answers_match(request.prediction, request.gold)
        return Verdict(ok, self.name, "match" if ok else "no_match")


# --------------------------------------------------------------------------------------------
_XBENCH_PROMPT = """\
请依据[参考答案]判断[回答]对[问题]给出的最终答案是否正确。

[问题]: {question}

[参考答案]: {gold}

[回答]: {prediction}

判分规则 (xbench-DeepSearch 公布的判分规则):
1. 先从[回答]中提取最终答案; 如果[回答]没有明确的最终答案, 判为错误。
2. 只看最终答案与[参考答案]之间是否存在实质性差异; 不要重新解题, 不要评论题目背景, 不要为与参考答案不同的答案辩护。
3. 数值类答案在可接受的微小误差范围内视为一致。
4. 存在任何不一致、歧义、不等价, 或提取出的答案错误, 都判为错误。

只输出两行:
最终答案: <从[回答]中提取的最终答案, 没有则写 无>
结论: 正确 或 结论: 错误"""

_WEBWALKERQA_PROMPT = """\
You are grading a quiz. You are given a question, the reference (true) answer and a student's
answer. Grade the student's answer as CORRECT or INCORRECT based only on its factual accuracy
with respect to the reference answer. Ignore differences in punctuation, phrasing and language.
The student's answer may contain more information than the reference answer, as long as nothing
in it conflicts with the reference answer. If it misses a fact the question asks for, or states
a conflicting one, it is INCORRECT.

QUESTION: {question}
REFERENCE ANSWER: {gold}
STUDENT ANSWER: {prediction}

Reason step by step in a few sentences, then end with one last line:
GRADE: CORRECT or GRADE: INCORRECT"""

_GAIA_PROMPT = """\
Decide whether the model's answer is the same answer as the ground truth, under GAIA's rule:
answers are quasi-exact: a number must be the same number (ignoring $, % and thousands
separators), a list must have the same elements in the same order, a string must be the same
string up to case, spaces and punctuation. Do not accept a different value, a missing element,
an added element or an answer that hedges between options.

QUESTION: {question}
GROUND TRUTH: {gold}
MODEL ANSWER: {prediction}

Reply with JSON only: {{"verdict": "correct"}} or {{"verdict": "incorrect"}}"""

_GENERIC_PROMPT = """\
Decide whether the response's final answer is the same, in substance, as the reference answer.
Ignore phrasing, case and punctuation; any conflicting, missing or hedged answer is incorrect.

QUESTION: {question}
REFERENCE ANSWER: {gold}
RESPONSE: {prediction}

Reply with JSON only: {{"verdict": "correct"}} or {{"verdict": "incorrect"}}"""

PROMPTS: dict[str, str] = {"xbench": _XBENCH_PROMPT, "webwalkerqa": _WEBWALKERQA_PROMPT,
                           "gaia": _GAIA_PROMPT, "generic": _GENERIC_PROMPT}
SYSTEM_PROMPT = "You are a careful, strict grader of question-answering benchmarks."

_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_XB = re.compile(r"结论\s*[:：]\s*\**\s*(正确|错误)")
_GRADE = re.compile(r"GRADE\s*[:：]\s*\**\s*(INCORRECT|CORRECT)\b", re.I)
_JSON_OBJ = re.compile(r"\{[^{}]*\}")
_TRUE_WORDS = {"correct", "true", "yes", "正确"}
_FALSE_WORDS = {"incorrect", "false", "no", "wrong", "错误"}


def parse_verdict(reply: str | None) -> bool | None:
    """True/False from a judge reply (see the module docstring), None when it holds no verdict."""
    if not reply:
        return None
    text = _THINK.sub("", reply)
    found: list[tuple[int, bool]] = []
    for m in _XB.finditer(text):
        found.append((m.start(), m.group(1) == "正确"))
    for m in _GRADE.finditer(text):
        found.append((m.start(), m.group(1).upper() == "CORRECT"))
    for m in _JSON_OBJ.finditer(text):
        try:
            obj = json.loads(m.group(0))
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        value = obj.get("verdict", obj.get("correct"))
        if isinstance(value, bool):
            found.append((m.start(), value))
        elif isinstance(value, str) and value.strip().lower() in _TRUE_WORDS | _FALSE_WORDS:
            found.append((m.start(), value.strip().lower() in _TRUE_WORDS))
    if not found:
        return None
    return max(found)[1]


class _Retryable(Exception):
    pass


@register_judge
class LLMJudge(Judge):
    """An OpenAI-compatible chat-completions judge with retries and a disk cache.

    Options: ``base_url`` (e.g. ``http://127.0.0.1:8000/v1``; default ``$MGRPO_JUDGE_BASE_URL``),
    ``model`` (default ``$MGRPO_JUDGE_MODEL``), ``api_key_env`` (name of the variable holding the
    key, default ``MGRPO_JUDGE_API_KEY``; ``None`` for a keyless local server), ``cache_dir``
    (default ``$MGRPO_JUDGE_CACHE_DIR`` or ``./.cache/judge_verdicts``; ``False`` disables),
    ``timeout_s``, ``max_retries``, ``backoff_s`` (first delay, doubled each retry, capped at
    ``max_backoff_s``), ``max_tokens``, ``temperature``.
    """

    name = "llm"

    def __init__(self, *, base_url: str | None = None, model: str | None = None,
                 api_key_env: str | None = "MGRPO_JUDGE_API_KEY",
                 cache_dir: str | os.PathLike[str] | bool | None = None,
                 timeout_s: float = 60.0, max_retries: int = 4, backoff_s: float = 1.0,
                 max_backoff_s: float = 30.0, max_tokens: int = 1024, temperature: float = 0.0,
                 sleep: Callable[[float], None] = time.sleep):
        self.base_url = (base_url or os.environ.get("MGRPO_JUDGE_BASE_URL") or "").rstrip("/")
        self.model = model or os.environ.get("MGRPO_JUDGE_MODEL") or ""
        if not self.base_url:
            raise JudgeConfigError("llm judge: no endpoint; pass base_url=... or set MGRPO_JUDGE_BASE_URL "
                                   "(an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1)")
        if not self.model:
            raise JudgeConfigError("llm judge: no model; pass model=... or set MGRPO_JUDGE_MODEL")
        self._api_key: str | None = None
        if api_key_env:
            self._api_key = os.environ.get(api_key_env) or None
            if self._api_key is None:
                raise JudgeConfigError(f"llm judge: environment variable {api_key_env} (the API key) is not "
                                       "set; set it, or pass api_key_env=None for a keyless local server")
        self.api_key_env = api_key_env
        if cache_dir is False:
            self.cache_dir: Path | None = None
        elif cache_dir is None or cache_dir is True:
            env = os.environ.get("MGRPO_JUDGE_CACHE_DIR")
            self.cache_dir = Path(env) if env else Path.cwd() / ".cache" / "judge_verdicts"
        else:
            self.cache_dir = Path(cache_dir)
        if max_retries < 0 or timeout_s <= 0 or backoff_s < 0:
            raise JudgeConfigError("llm judge: need max_retries >= 0, timeout_s > 0, backoff_s >= 0")
        self.timeout_s, self.max_retries = float(timeout_s), int(max_retries)
        self.backoff_s, self.max_backoff_s = float(backoff_s), float(max_backoff_s)
        self.max_tokens, self.temperature = int(max_tokens), float(temperature)
        self._sleep = sleep

    def __repr__(self) -> str:  # never show the key
        return f"LLMJudge(base_url={self.base_url!r}, model={self.model!r}, api_key_env={self.api_key_env!r})"

    # -- prompt and cache ---------------------------------------------------------------------
    def prompt(self, request: JudgeRequest) -> str:
        template = PROMPTS.get(request.rule, _GENERIC_PROMPT)
        return template.format(question=request.question, gold=request.gold, prediction=request.prediction)

    def cache_key(self, prompt: str) -> str:
        return sha256_text(self.model + "\n" + SYSTEM_PROMPT + "\n" + prompt)

    def _cache_path(self, key: str) -> Path | None:
        return None if self.cache_dir is None else self.cache_dir / key[:2] / f"{key}.json"

    def _cache_get(self, key: str) -> Verdict | None:
        path = self._cache_path(key)
        if path is None or not path.is_file():
            return None
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            if entry.get("key") != key:
                raise ValueError("key mismatch")
            return Verdict(entry["correct"] is True, self.name, str(entry["verdict"]), entry.get("error"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring unreadable judge cache entry %s (%s)", path, type(exc).__name__)
            return None

    def _cache_put(self, key: str, verdict: Verdict) -> None:
        path = self._cache_path(key)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        # Only the key hash and the verdict: no prompt, no reply (XBench plain text never on disk).
        entry = {"schema": 1, "key": key, "correct": verdict.correct, "verdict": verdict.verdict,
                 "error": verdict.error}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(entry, fh)
        os.replace(tmp, path)

    # -- HTTP ---------------------------------------------------------------------------------
    def _post(self, prompt: str) -> str | None:
        import requests

        url = f"{self.base_url}/chat/completions"
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        body = {"model": self.model, "temperature": self.temperature, "max_tokens": self.max_tokens,
                "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                             {"role": "user", "content": prompt}]}
        last = "no attempt"
        for attempt in range(self.max_retries + 1):
            if attempt:
                self._sleep(min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s))
            try:
                resp = requests.post(url, json=body, headers=headers, timeout=self.timeout_s)
            except (requests.Timeout, requests.ConnectionError) as exc:
                last = f"{type(exc).__name__} contacting {url}"
                log.info("llm judge: %s (attempt %d/%d)", last, attempt + 1, self.max_retries + 1)
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                last = f"HTTP {resp.status_code} from {url}"
                log.info("llm judge: %s (attempt %d/%d)", last, attempt + 1, self.max_retries + 1)
                continue
            if resp.status_code != 200:
                hint = f"; check ${self.api_key_env}" if resp.status_code in (401, 403) and self.api_key_env else ""
                raise RuntimeError(f"HTTP {resp.status_code} from {url}{hint}")
            try:
                content = resp.json()["choices"][0]["message"].get("content")
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                raise RuntimeError(f"malformed chat-completions response from {url}") from None
            return content if isinstance(content, str) else None
        raise _Retryable(f"{last}; gave up after {self.max_retries + 1} attempts")

    def judge(self, request: JudgeRequest) -> Verdict:
        prompt = self.prompt(request)
        key = self.cache_key(prompt)
        cached = self._cache_get(key)
        if cached is not None:
            return cached
        try:
            reply = self._post(prompt)
        except (_Retryable, RuntimeError) as exc:
            return Verdict(False, self.name, "judge_failed", str(exc))  # not cached: rerun retries
        if reply is None or not reply.strip():
            verdict = Verdict(False, self.name, "empty", "judge reply was empty; counted incorrect")
        else:
            decision = parse_verdict(reply)
            if decision is None:
                shown = (f"sha256 {sha256_text(reply)[:16]}" if request.sensitive
                         else repr(reply[:200]))
                verdict = Verdict(False, self.name, "garbage",
                                  f"judge reply held no verdict ({len(reply)} chars, {shown}); counted incorrect")
            else:
                verdict = Verdict(decision, self.name, "correct" if decision else "incorrect")
        self._cache_put(key, verdict)
        return verdict


# --------------------------------------------------------------------------------------------
def prediction_key(prediction: str) -> str:
    """The prediction part of a replay key: ``sha256`` hex of the prediction text."""
    return sha256_text(prediction)


def _record_prediction_hash(record: Mapping[str, Any]) -> str | None:
    if isinstance(record.get("prediction_sha256"), str):
        return record["prediction_sha256"]
    pred = record.get("prediction")
    if not isinstance(pred, str):
        return None
    if pred.startswith("sha256:") and len(pred) == 71:  # a redacted (sensitive) record
        return pred[7:]
    return prediction_key(pred)


@register_judge
class ReplayJudge(Judge):
    """Verdicts recorded in task-record JSONL files (docs/report.md).

    Options: ``records`` — a path, a list of paths, or an iterable of record mappings. Each record
    needs ``benchmark``, ``task_id``, ``prediction`` (text or ``sha256:<hex>``) or
    ``prediction_sha256``, and ``correct``; ``verdict``/``error`` are carried over.
    """

    name = "replay"

    def __init__(self, *, records: Any = None):
        if records is None:
            raise JudgeConfigError("replay judge: pass records=PATH (task-record JSONL) or a list of records")
        self._table: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        if isinstance(records, (str, os.PathLike)):
            records = [records]
        for item in records:
            if isinstance(item, (str, os.PathLike)):
                self._load_file(Path(item))
            else:
                self._add(item, "<records>", None)

    def _load_file(self, path: Path) -> None:
        if not path.is_file():
            raise BenchmarkDataMissing("replay", f"task-record file {path} not found")
        for lineno, record in read_jsonl(path, "a task record"):
            self._add(record, path, lineno)

    def _add(self, record: Any, path: Any, lineno: int | None) -> None:
        if not isinstance(record, Mapping):
            raise BenchmarkDataError(path, lineno, "a task record must be a JSON object")
        missing = [k for k in ("benchmark", "task_id", "correct") if k not in record]
        pred_hash = _record_prediction_hash(record)
        if pred_hash is None:
            missing.append("prediction")
        if missing:
            raise BenchmarkDataError(path, lineno, f"task record lacks {', '.join(missing)}")
        self._table[(str(record["benchmark"]), str(record["task_id"]), pred_hash)] = record

    def __len__(self) -> int:
        return len(self._table)

    def judge(self, request: JudgeRequest) -> Verdict:
        key = (request.benchmark, request.task_id, prediction_key(request.prediction))
        record = self._table.get(key)
        if record is None:
            return Verdict(False, self.name, "missing",
                           f"no recorded verdict for {request.benchmark}/{request.task_id} "
                           f"with prediction sha256 {key[2][:12]}; counted incorrect")
        return Verdict(record["correct"] is True, self.name, str(record.get("verdict") or "recorded"),
                       record.get("error"))
