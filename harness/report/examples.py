"""Example tasks behind each row of the accuracy table, with their transcripts (issue 15 item 8).

A row of the accuracy table (benchmark × trainer) links to ``examples-<benchmark>.html#<anchor>``,
a page written next to ``report.html`` (self-contained like it: no script, no external resource).
For each trainer (arm) and each of its runs with eval records of the benchmark the page shows the
**first** :data:`EXAMPLES_PER_KIND` failures and successes, in the order of the eval file, at the
run's **latest evaluated step of that benchmark** (the step whose accuracy the table shows; a task
id that appears twice counts once, the last record wins, as in the table). Failed runs are shown
too, marked (the table leaves them out of its statistics). Each example gives the task id, the
question, prediction, gold, verdict, error and counters, and the transcript's turns
(:mod:`harness.transcript` format); a record without one says "no transcript recorded".

Reading is lazy (the report's perf budget, tests/harness/test_report_perf.py): the tables are built
from records read *without* their transcripts (``read_tasks(transcripts=False)``); only the one eval
file per run × benchmark shown here is read again with them.

Deviation: examples are separate pages, not sections of report.html, so that the report stays
small (a transcript is kilobytes; 3 trainers × 3 seeds × 3 benchmarks × 6 examples are megabytes).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from harness import records as rec
from harness.report.dataset import Dataset, RunInfo
from harness.report.render import Bullets, Document, Example, Heading, Link, Para, Turn

EXAMPLES_PER_KIND = 3
"""Failures, and successes, shown per run."""
FIELD_CHARS = 1000
"""Characters shown of a question, prediction or gold (the transcript has its own limits)."""
TURN_CHARS = 20_000
"""Characters shown of one transcript turn (writers cut far earlier; this guards the page)."""
NO_TRANSCRIPT = "no transcript recorded"
PAGE_PREFIX = "examples-"


def page_name(benchmark: str) -> str:
    """File name of a benchmark's examples page (next to report.html)."""
    return f"{PAGE_PREFIX}{benchmark}.html"


def anchor(arm: str) -> str:
    """HTML id of an arm's section on an examples page."""
    return "arm-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", arm).strip("-") or "unnamed")


def href(benchmark: str, arm: str) -> str:
    """Relative link from report.html to a row's examples."""
    return f"{quote(page_name(benchmark))}#{anchor(arm)}"


@dataclass
class RunExamples:
    """The examples of one run at its latest evaluated step of one benchmark."""

    run: RunInfo
    step: int
    n_tasks: int
    n_correct: int
    failures: list[rec.TaskRecord]
    successes: list[rec.TaskRecord]


@dataclass
class ExamplesPage:
    """One benchmark's page: per arm (accuracy-table order), the runs' examples."""

    benchmark: str
    arms: dict[str, list[RunExamples]] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return page_name(self.benchmark)


def collect(ds: Dataset, n: int = EXAMPLES_PER_KIND) -> list[ExamplesPage]:
    """Pick the examples of every benchmark × arm with eval records (reads one file per run × benchmark)."""
    ev = ds.evals
    if not len(ev):
        return []
    last = ev.groupby(["run_id", "benchmark"])["step"].max().to_dict()
    files: dict[str, list[tuple[int, str, Path]]] = {}
    pages: list[ExamplesPage] = []
    for bench in sorted(ev["benchmark"].unique()):
        page = ExamplesPage(bench)
        for arm in ds.arms():
            runs = sorted((r for r in ds.runs if r.arm == arm and (r.run_id, bench) in last),
                          key=lambda r: (r.seed is None, r.seed if r.seed is not None else 0, r.run_id))
            shown = []
            for r in runs:
                step = int(last[(r.run_id, bench)])
                if r.run_id not in files:
                    files[r.run_id] = rec.RunPaths(r.path).eval_files()
                shown.append(_run_examples(r, step, [p for s, b, p in files[r.run_id] if s == step and b == bench], n))
            if shown:
                page.arms[arm] = shown
        pages.append(page)
    return pages


def _run_examples(run: RunInfo, step: int, paths: list[Path], n: int) -> RunExamples:
    # one answer per task and inference run; first-appearance order, last record wins (as the table)
    by_id: dict[tuple[str, int], rec.TaskRecord] = {}
    for path in paths:
        for r in rec.read_tasks(path, tolerate_truncated_tail=True).records:
            by_id[(r.task_id, r.inference_run or 0)] = r
    tasks = list(by_id.values())
    failures = [t for t in tasks if not t.correct]
    successes = [t for t in tasks if t.correct]
    return RunExamples(run, step, len(tasks), len(successes), failures[:n], successes[:n])


def summary(pages: list[ExamplesPage]) -> list[dict[str, Any]]:
    """The examples in ``report.json``: per page and arm, the runs' steps and shown task ids."""
    return [{"benchmark": p.benchmark, "file": p.filename,
             "arms": [{"arm": arm, "anchor": anchor(arm),
                       "runs": [{"run_id": x.run.run_id, "seed": x.run.seed, "state": x.run.state,
                                 "step": x.step, "n_tasks": x.n_tasks, "n_correct": x.n_correct,
                                 "failures": [t.task_id for t in x.failures],
                                 "successes": [t.task_id for t in x.successes],
                                 "with_transcript": sum(t.transcript is not None
                                                        for t in x.failures + x.successes)}
                                for x in runs]}
                      for arm, runs in p.arms.items()]}
            for p in pages]


def build_page(page: ExamplesPage, report_title: str, n: int = EXAMPLES_PER_KIND) -> Document:
    """The examples page of one benchmark as a document (rendered with :func:`render.to_html`)."""
    doc = Document(f"Examples: {page.benchmark}")
    doc.add(Para(
        f"Part of the report {report_title!r} (report.html in this folder). For each trainer of the "
        f"accuracy table and each of its runs: the first {n} failures and the first {n} successes, in "
        f"the order of the eval file, at the run's latest evaluated step of {page.benchmark} (the step "
        f"whose accuracy the table shows; a task evaluated twice counts once, its last record). Failed "
        f"runs are shown too, though the table leaves them out. Crashes and timeouts are failures."),
        Para("Transcripts: the system prompt is left out; each observation (tool result, sub-agent "
             "result) was cut when recorded to the size the transcript states, and a cut turn says how "
             "long it was. Sub-agent turns are indented under the planner turn that delegated them."),
        Bullets([Link("back to the report", "report.html")]
                + [Link(f"{arm} ({len(runs)} run{'s' if len(runs) != 1 else ''})", f"#{anchor(arm)}")
                   for arm, runs in page.arms.items()]))
    for arm, runs in page.arms.items():
        doc.add(Heading(1, f"{arm} on {page.benchmark}", anchor=anchor(arm)))
        for x in runs:
            r = x.run
            state = r.state + (", left out of the table" if r.failed else "")
            doc.add(Heading(2, f"run {r.run_id} (seed {r.seed}, {state}): step {x.step}, "
                               f"{x.n_correct} of {x.n_tasks} correct"))
            for kind, shown, total in (("failures", x.failures, x.n_tasks - x.n_correct),
                                       ("successes", x.successes, x.n_correct)):
                doc.add(Heading(3, f"first {kind}: {len(shown)} of {total}"))
                if not shown:
                    doc.add(Para(f"no {kind} at this step"))
                doc.add(*(example(t) for t in shown))
    return doc


def _short(value: Any, limit: int = FIELD_CHARS) -> str:
    if value is None:
        return "none"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def example(t: rec.TaskRecord) -> Example:
    """One task record as an example block: its fields and its transcript's turns."""
    notes, turns, question = transcript_view(t.transcript)
    q = t.extra.get("question")
    if isinstance(q, str):
        question = q
    elif question is not None and turns and turns[0].text == question:
        turns = turns[1:]  # shown as the question
    verdict = t.verdict or ("correct" if t.correct else "incorrect")
    fields: list[tuple[str, str | Link]] = [
        ("task id", t.task_id), ("question", _short(question) if question is not None else "not recorded"),
        ("prediction", _short(t.prediction) if t.prediction is not None else "no answer"),
        ("gold", _short(t.gold)), ("verdict", verdict + (f" (judge: {t.judge})" if t.judge else "")),
    ]
    if t.error:
        fields.append(("error", _short(t.error)))
    counters = [f"{name} {v:.2f}" if isinstance(v, float) else f"{name} {v}"
                for name, v in (("turns", t.n_turns), ("sub-agent calls", t.n_sub_calls),
                                ("tokens", t.n_tokens), ("latency (s)", t.latency_s))
                if v is not None]
    if counters:
        fields.append(("counters", ", ".join(counters)))
    pred = "no answer" if t.prediction is None else _short(t.prediction, 80)
    return Example(f"{t.task_id}: {verdict}; prediction {pred}", fields, notes, turns)


def transcript_view(tr: Any) -> tuple[list[str], list[Turn], str | None]:
    """(notes, turns, question) of a record's transcript; tolerant of any JSON (records are input)."""
    if tr is None:
        return [NO_TRANSCRIPT], [], None
    if not isinstance(tr, dict) or not isinstance(tr.get("turns"), list):
        return [f"transcript in an unknown format, not shown: {_short(tr, 200)}"], [], None
    limits = tr.get("limits") if isinstance(tr.get("limits"), dict) else {}
    notes = []
    if tr.get("cut"):
        notes.append(f"Some turns were cut when recorded (observations to "
                     f"{limits.get('observation_chars', '?')} characters, model turns to "
                     f"{limits.get('model_chars', '?')}).")
    missing = tr.get("missing_sub_calls")
    if isinstance(missing, list) and missing:
        notes.append(f"The turns of sub-agent call(s) {', '.join(str(m) for m in missing)} were not recorded "
                     f"(the sub-agent ran in its own service); the planner's observation shows the result.")
    if tr.get("end_reason"):
        notes.append(f"The episode ended with: {tr['end_reason']}.")
    turns: list[Turn] = []
    question: str | None = None
    for i, t in enumerate(tr["turns"]):
        if not isinstance(t, dict):
            continue
        agent, role, call = str(t.get("agent", "?")), str(t.get("role", "?")), t.get("call")
        text = t.get("text")
        text = text if isinstance(text, str) else _short(text)
        if len(text) > TURN_CHARS:
            text = text[:TURN_CHARS] + f"… ({len(text)} characters; shortened for this page)"
        nested = agent == "sub_agent" or call is not None
        label = agent.replace("_", "-") + (f" (call {call})" if call is not None else "") + f" · {role}"
        chars = t.get("chars")
        if isinstance(chars, int) and not isinstance(chars, bool):
            label += f" · cut when recorded, {chars} characters in all"
        if i == 0 and role == "user" and not nested:
            question = text
        turns.append(Turn(label, text, role if role in ("assistant", "tool", "user") else "other", nested))
    if not turns:
        notes.append("The transcript has no turns.")
    return notes, turns, question
