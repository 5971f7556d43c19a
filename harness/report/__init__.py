"""Comparison reports with stability curves: ``python -m harness.report`` (docs/report.md).

Turns run records (never stdout) into ``report.md``, a self-contained ``report.html`` (figures
embedded as base64 PNG), the PNG figures under ``figures/`` and a machine-readable
``report.json``::

    python -m harness.report [--runs runs/] [--out reports/latest] [--smooth auto|ALPHA]
                             [--collapse-margin 0.1] [--bootstrap 2000] [--seed 0]

Contents: the paper's claims (Fig. 6, 7, 8) with verdicts, final accuracy per benchmark × trainer
(mean ± std over seeds, seeded bootstrap 95% interval, tasks, seeds; each row links to its
``examples-<benchmark>.html`` page: first failures and successes with their transcripts),
stability curves (eval accuracy and training reward vs step, raw and EMA, ±std bands), sample
efficiency, per-agent diagnostics with the sub-calls histogram and its 0.99 quantile, collapse
detection and the provenance of every run. The rules are in :mod:`~harness.report.stats`,
:mod:`~harness.report.analysis` and docs/report.md.

Package layout (one job per module): ``dataset`` (records -> tables), ``stats`` (numerical rules),
``analysis`` (report tables), ``figures`` (matplotlib), ``examples`` (example tasks and their
transcripts), ``document`` (sections), ``render`` (Markdown/HTML). Reads records only: no torch,
no trainer imports (docs/architecture.md §Layers and dependency direction).

Exit status: 0 written; 1 nothing to report or unreadable records (the message names the folder,
file and line); 2 bad command line.

Console summary (issue 14): the report's title, the folders that were skipped and why, the caveats
of the report (short runs, fewer than 3 seeds, runs whose sub-agent did not train) and each verdict
with the caveats that concern it, so the console never states a verdict without the report's
qualifications.

Decisions (docs/report.md): the default ``--out`` is ``reports/latest`` (not
``reports/<name>``); a ``report.json`` with the same tables is written too.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness import records as rec
from harness.report import analysis as _analysis
from harness.report import examples as _examples
from harness.report import figures as _figures
from harness.report.analysis import Analysis
from harness.report.document import Options, build_document
from harness.report.figures import FigureInfo
from harness.report.dataset import Dataset, ReportInputError, load
from harness.report.render import pretty_json, to_html, to_markdown, write_text_atomic
from harness.report.stats import AUTO_SPAN_SHARE, auto_alpha

__all__ = ["Options", "ReportResult", "ReportInputError", "build_report", "main"]

DEFAULT_RUNS = Path("runs")
DEFAULT_OUT = Path("reports/latest")
FIGURES_DIR = "figures"


@dataclass
class ReportResult:
    """What :func:`build_report` wrote and computed."""

    out_dir: Path
    markdown: Path
    html: Path
    json: Path
    figures: list[FigureInfo]
    figure_paths: list[Path]
    analysis: Analysis
    dataset: Dataset
    example_pages: list[Path] = field(default_factory=list)
    """``examples-<benchmark>.html`` pages, one per benchmark with eval records."""


def build_report(opt: Options) -> ReportResult:
    """Load the records under ``opt.runs_dir`` and write the report into ``opt.out_dir``.

    Raises :class:`ReportInputError` (nothing to report) or :class:`harness.records.RecordError`
    (a broken or too-new record, naming file and line).
    """
    if opt.smooth is not None and not 0.0 < opt.smooth <= 1.0:
        raise ValueError(f"--smooth must be in (0, 1], got {opt.smooth}")
    if opt.collapse_margin <= 0:
        raise ValueError(f"--collapse-margin must be > 0, got {opt.collapse_margin}")
    if opt.n_boot < 100:
        raise ValueError(f"--bootstrap must be >= 100 resamples, got {opt.n_boot}")
    ds = load(opt.runs_dir)
    if opt.smooth is None:  # --smooth auto: scaled to the longest run
        longest = max((r.max_step or 0 for r in ds.runs), default=0)
        opt = replace(opt, smooth=auto_alpha(longest), smooth_auto=True)
    an = _analysis.analyse(ds, smooth=opt.smooth, collapse_margin=opt.collapse_margin,
                           seed=opt.seed, n_boot=opt.n_boot)
    figs = _figures.all_figures(ds, an, opt.smooth, opt.smooth_auto)
    examples = _examples.collect(ds)
    doc = build_document(ds, an, figs, opt, examples)

    out = Path(opt.out_dir)
    fig_dir = out / FIGURES_DIR
    fig_dir.mkdir(parents=True, exist_ok=True)
    fig_paths = []
    for f in figs:
        p = fig_dir / f.filename
        write_text_atomic(p, f.png)
        fig_paths.append(p)
    pages = []  # before the report, so that its links are never dangling
    for ex in examples:
        pages.append(out / ex.filename)
        write_text_atomic(pages[-1], to_html(_examples.build_page(ex, opt.title)))
    md, page, js = out / "report.md", out / "report.html", out / "report.json"
    write_text_atomic(md, to_markdown(doc, FIGURES_DIR))
    write_text_atomic(page, to_html(doc))
    write_text_atomic(js, pretty_json({**_summary(ds, an, figs, opt),
                                       "examples": _examples.summary(examples)}) + "\n")
    return ReportResult(out, md, page, js, figs, fig_paths, an, ds, pages)


def _summary(ds: Dataset, an: Analysis, figs: list[FigureInfo], opt: Options) -> dict[str, Any]:
    def clean(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if k != "draws"}

    return {
        "schema": rec.SCHEMA_VERSION,
        "options": {"runs_dir": str(opt.runs_dir), "smooth": opt.smooth, "smooth_auto": opt.smooth_auto,
                    "collapse_margin": opt.collapse_margin, "n_boot": opt.n_boot, "seed": opt.seed},
        "about": opt.about,
        "accuracy": [clean(dict(c.__dict__)) for c in an.accuracy],
        "claims": [{**{k: v for k, v in c.__dict__.items() if k != "comparisons"},
                    "comparisons": [dict(x.__dict__) for x in c.comparisons]} for c in an.claims],
        "caveats": [dict(c.__dict__) for c in an.caveats],
        "in_distribution": [dict(r.__dict__) for r in an.in_distribution],
        "unseen": [{**r.__dict__, "beyond_2sd": r.beyond_2sd} for r in an.unseen],
        "skipped": [{"folder": name, "why": why} for name, why in ds.skipped],
        "collapses": [dict(c.__dict__) for c in an.collapses],
        "n_series_checked": an.n_series_checked,
        "diagnostics": [dict(d.__dict__) for d in an.diagnostics],
        "sub_calls": [{"arm": h.arm, "source": h.source, "q99": h.q99, "n_rollouts": h.n_rollouts,
                       "counts": [int(x) for x in h.counts]} for h in an.sub_calls],
        "runs": [{"run_id": r.run_id, "arm": r.arm, "trainer": r.trainer, "seed": r.seed,
                  "state": r.state, "short": r.short, "last_step": r.last_step,
                  "eval_steps": r.eval_steps, "benchmarks": r.benchmarks,
                  "schemas": sorted(r.schemas), "notes": r.notes, "sub_steps": r.sub_steps,
                  "not_comparable": r.not_comparable} for r in ds.runs],
        "figures": [{"name": f.name, "file": f"{FIGURES_DIR}/{f.filename}", "title": f.title,
                     "panels": [dict(p.__dict__) for p in f.panels]} for f in figs],
    }


def _smooth_arg(text: str) -> float | None:
    return None if text == "auto" else float(text)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness.report",
        description="Comparison report (Markdown + self-contained HTML + PNG figures) from run "
                    "records (docs/report.md).")
    p.add_argument("--runs", type=Path, default=DEFAULT_RUNS,
                   help="folder of run folders runs/<run_id>/ (or one run folder); default runs/")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help="output folder; default reports/latest")
    p.add_argument("--smooth", type=_smooth_arg, default=None, metavar="ALPHA|auto",
                   help="EMA weight of a point one optimizer step after the previous one (step-aware; "
                        "in (0, 1], 1 = none); default auto: scaled to the run length, an EMA span of "
                        f"{AUTO_SPAN_SHARE:.0%}% of the longest run's steps (6 steps -> 0.91, 100 -> 0.095)")
    p.add_argument("--collapse-margin", type=float, default=0.1, metavar="X",
                   help="drop below the smoothed peak (absolute, accuracy/reward units) that "
                        "counts as a collapse when it does not recover; default 0.1")
    p.add_argument("--bootstrap", type=int, default=2000, metavar="N",
                   help="bootstrap resamples per table cell; default 2000")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed; default 0")
    p.add_argument("--title", default="M-GRPO comparison report")
    p.add_argument("--about", type=Path, default=None, metavar="FILE",
                   help="a text file (paragraphs, '- ' bullets) that says what the runs' setting is, shown under "
                        "the title as 'About this setting' and kept in report.json; python -m harness experiment "
                        "passes its preset's ABOUT.md")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    a = parser.parse_args(argv)
    if a.smooth is not None and not 0.0 < a.smooth <= 1.0:
        parser.error(f"--smooth must be in (0, 1], got {a.smooth}")
    if a.collapse_margin <= 0:
        parser.error(f"--collapse-margin must be > 0, got {a.collapse_margin}")
    if a.bootstrap < 100:
        parser.error(f"--bootstrap must be >= 100, got {a.bootstrap}")
    about = None
    if a.about is not None:
        try:
            about = a.about.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            parser.error(f"--about {a.about}: cannot read it ({exc})")
    opt = Options(runs_dir=a.runs, out_dir=a.out, smooth=a.smooth,
                  collapse_margin=a.collapse_margin, n_boot=a.bootstrap, seed=a.seed, title=a.title, about=about)
    try:
        res = build_report(opt)
    except (ReportInputError, rec.RecordError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    sys.stdout.write(console_summary(res, opt.title))
    return 0


def console_summary(res: ReportResult, title: str) -> str:
    """What ``main`` prints: the same qualifications as the report (title, caveats, skipped folders)."""
    ds, an = res.dataset, res.analysis
    lines = [f"report {title!r} of {len(ds.runs)} runs ({', '.join(ds.arms())}) written to {res.out_dir}:",
             f"  {res.markdown}", f"  {res.html}", f"  {res.json}"]
    lines += [f"  {p}" for p in res.example_pages]
    lines += [f"  skipped {name}/: {why}" for name, why in ds.skipped]
    lines += [f"  caveat: {c.text}" for c in an.caveats]
    for c in an.claims:
        lines.append(f"  {c.figure} {c.statement}: {c.verdict}"
                     + (f" (caveats: {'; '.join(c.caveats)})" if c.caveats else ""))
    for u in an.unseen:
        lines.append(f"  unseen worlds, {u.benchmark} {u.arm}: {u.before:.3f} -> {u.after:.3f} (gain {u.diff_mean:+.3f}"
                     + (f", seed std after {u.after_std:.3f}, gain > 2 std: {'yes' if u.beyond_2sd else 'no'}"
                        if u.beyond_2sd is not None else "") + f"; {u.n_seeds} seed(s))")
    for r in ds.runs:
        if r.failed or r.notes:
            lines.append(f"  note {r.run_id}: {r.state}; {'; '.join(r.notes)}")
    return "\n".join(lines) + "\n"
