"""Assemble the report's document (sections, tables, figures) from the analysis (docs/report.md).

Section order: claims first (what a reader wants) with their caveats and whether each mgrpo
run's sub-agent trained, then the accuracy table (each row links to its examples page,
:mod:`harness.report.examples`), stability curves, sample efficiency, per-agent
diagnostics, collapse detection, runs and provenance (with the folders that were skipped), and the
rules used. Numbers are fractions (accuracy in [0, 1]) with three decimals.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass
from pathlib import Path

from harness.report.analysis import Analysis, Claim, Comparison, InDistributionRow
from harness.report.figures import FigureInfo
from harness.report.dataset import SUB_MIN_FRACTION, SUB_TRAINERS, Dataset, RunInfo
from harness.report.examples import EXAMPLES_PER_KIND, ExamplesPage
from harness.report.examples import href as examples_href
from harness.report.stats import smooth_text
from harness.report.render import Bullets, Details, Document, Fig, Heading, Link, Para, Table, pretty_json


@dataclass
class Options:
    """Report settings (the CLI flags)."""

    runs_dir: Path
    out_dir: Path
    smooth: float | None = None
    """Step-aware EMA weight of a point one optimizer step after the last, in (0, 1]; 1 = none; None
    (``--smooth auto``, the default) scales it to the longest run (:func:`harness.report.stats.auto_alpha`)."""
    smooth_auto: bool = False
    """Set by :func:`harness.report.build_report` when ``smooth`` was resolved from the run length."""
    collapse_margin: float = 0.1
    """Absolute drop below the smoothed peak that counts as a collapse (accuracy/reward units)."""
    n_boot: int = 2000
    """Bootstrap resamples per table cell."""
    seed: int = 0
    """Seed of the bootstrap generators (each cell's generator also hashes its labels)."""
    title: str = "M-GRPO comparison report"
    about: str | None = None
    """Text of ``--about FILE``: what the runs' setting is (e.g. a probe preset's design), shown under the title."""


def _gain(r: InDistributionRow) -> str:
    """A before/after row's mean gain, ± the sample std over seeds when there are several."""
    return f"{signed(r.diff_mean)} ± {f3(r.diff_std)}" if r.diff_std == r.diff_std else signed(r.diff_mean)


def _sizes(r: InDistributionRow) -> list[str]:
    """A before/after row's tasks, seeds and final steps cells."""
    return [_range(*r.n_tasks), f"{r.n_seeds} ({', '.join(str(x) for x in r.seeds)})", _range(*r.final_steps)]


def about_blocks(text: str) -> list[Para | Bullets]:
    """``--about`` text as report blocks: paragraphs split at blank lines; a block whose first line starts with
    ``- `` is a bullet list, in which a line that does not start so continues the item before it."""
    out: list[Para | Bullets] = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = [ln.strip() for ln in block.splitlines() if ln.strip()]
        if not lines:
            continue
        if lines[0].startswith("- "):
            items: list[str] = []
            for ln in lines:
                if ln.startswith("- "):
                    items.append(ln[2:])
                else:
                    items[-1] += " " + ln
            out.append(Bullets(list(items)))
        else:
            out.append(Para(" ".join(lines)))
    return out


def f3(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def peak_text(values: dict[str, float]) -> str:
    """``"812"`` or ``"812; 2,048"`` (resident; GPU) from a diagnostics row, ``n/a`` when not recorded."""
    def mib(x: float | None) -> str | None:
        return None if x is None or math.isnan(x) else f"{x:,.0f}"
    rss, gpu = mib(values.get("peak_rss_mib")), mib(values.get("peak_gpu_mib"))
    return "n/a" if rss is None else rss if gpu is None else f"{rss}; {gpu}"


def signed(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:+.3f}"


def _range(a: int, b: int) -> str:
    return str(a) if a == b else f"{a}–{b}"


def _comparison_numbers(c: Comparison) -> str:
    if c.verdict == "not run":
        return f"{c.better} vs {c.worse}: not run ({c.scope})"
    s = (f"{c.better} {f3(c.mean_better)} vs {c.worse} {f3(c.mean_worse)}: diff {signed(c.diff)}, "
         f"95% CI [{signed(c.ci_low)}, {signed(c.ci_high)}]")
    if c.steps_above is not None and c.steps_above[1]:
        s += f"; above at {c.steps_above[0]}/{c.steps_above[1]} eval steps"
    return s


def _claim_summary(cl: Claim) -> str:
    pooled = [c for c in cl.comparisons if c.scope.startswith(("pooled", "training")) or
              c.verdict == "not run"]
    return " | ".join(_comparison_numbers(c) for c in pooled) or "no data"


def build_document(ds: Dataset, an: Analysis, figs: list[FigureInfo], opt: Options,
                   examples: list[ExamplesPage] | None = None) -> Document:
    """The report's sections; ``examples``: the examples pages written next to the report (rows of
    the accuracy table link to theirs)."""
    doc = Document(opt.title)
    linked = {(p.benchmark, arm) for p in examples or [] for arm in p.arms}
    fig = {f.name: f for f in figs}
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    arms = ds.arms()
    n_failed = sum(r.failed for r in ds.runs)
    doc.add(Para(
        f"Generated {now} from the records in {ds.runs_dir} ({len(ds.runs)} runs; arms: "
        f"{', '.join(arms)}; {n_failed} failed). Settings: EMA α = {smooth_text(opt.smooth, opt.smooth_auto)}, collapse margin "
        f"= {opt.collapse_margin:g}, {opt.n_boot} bootstrap resamples, bootstrap seed {opt.seed}. "
        f"Source: arXiv 2511.13288 (M-GRPO); its results are curves, so each claim below is a "
        f"verdict from our own runs."))

    if opt.about:
        doc.add(Heading(1, "About this setting"), *about_blocks(opt.about))

    # -- claims
    doc.add(Heading(1, "The paper's claims"))
    doc.add(Table(["figure", "claim", "verdict", "numbers behind the verdict", "caveats"],
                  [[c.figure, c.statement, c.verdict, _claim_summary(c), "; ".join(c.caveats) or "none"]
                   for c in an.claims]))
    if an.caveats:
        doc.add(Para("Caveats (each verdict above lists those that concern its arms):"),
                Bullets([c.text for c in an.caveats]))
    rows = []
    for cl in an.claims:
        for c in cl.comparisons:
            above = (f"{c.steps_above[0]}/{c.steps_above[1]}" if c.steps_above and c.steps_above[1]
                     else "n/a")
            rows.append([cl.figure, f"{c.better} > {c.worse}", c.scope, c.metric,
                         f3(c.mean_better), f3(c.mean_worse), signed(c.diff),
                         f"[{signed(c.ci_low)}, {signed(c.ci_high)}]", f"{c.n_better}/{c.n_worse}",
                         above, c.verdict])
    doc.add(Table(["figure", "comparison", "scope", "metric", "first", "second", "diff",
                   "95% CI of diff", "seeds (first/second)", "above at eval steps", "verdict"], rows))
    doc.add(Para(
        "Verdict rule: d = mean over seeds of the first arm's final accuracy minus the second's "
        "(pooled = mean over the benchmarks both arms were evaluated on); the interval is the "
        "2.5/97.5 percentile of the difference of independent hierarchical bootstrap draws (seeds, "
        "then inference runs and tasks within a seed). supported: d > 0 and the interval excludes 0; inconclusive: "
        "d > 0 but the interval contains 0; not supported: d <= 0; not run: an arm has no "
        "completed records. An ordering of three arms needs both pairs supported. Failed runs "
        "are excluded from final accuracy."))
    sub_runs = [r for r in ds.runs if r.trainer in SUB_TRAINERS]
    if sub_runs:
        doc.add(Heading(2, "Did the sub-agent train?"))
        doc.add(Table(["run", "trainer", "seed", "state", "planner steps", "sub-agent steps", "comparable"],
                      [[r.run_id, r.arm, str(r.seed), r.state, str(r.last_step.get("planner", "n/a")),
                        "unknown (no step records)" if r.sub_steps is None else str(r.sub_steps),
                        f"no: {r.not_comparable}" if r.not_comparable else
                        ("unknown" if r.sub_steps is None else "yes")] for r in sub_runs]))
        doc.add(Para(f"A run whose sub-agent trained no step, or fewer than {SUB_MIN_FRACTION:.0%} of the "
                     f"planner's steps, is not comparable: its sub-agent is (nearly) the weights it "
                     f"started from, so it stands for frozen_sub, not for {', '.join(SUB_TRAINERS)}. "
                     f"Its numbers are still shown and counted; the verdicts that use it say so."))

    # -- accuracy table
    doc.add(Heading(1, "Final accuracy per benchmark and trainer"))
    if an.accuracy:
        doc.add(Table(
            ["benchmark", "trainer", "accuracy (mean ± std)", "95% bootstrap CI", "tasks",
             "inference runs (spread)", "seeds", "final step", "failed runs (excluded)", "examples"],
            [[c.benchmark, c.arm,
              f"{f3(c.mean)} ± {f3(c.std)}" if c.n_seeds else "n/a",
              f"[{f3(c.ci_low)}, {f3(c.ci_high)}]" if c.n_seeds else "n/a",
              _range(*c.n_tasks) if c.n_seeds else "0",
              (_range(*c.n_inference_runs) + (f" (± {f3(c.run_spread)})" if c.run_spread == c.run_spread else ""))
              if c.n_seeds else "0",
              f"{c.n_seeds} ({', '.join(str(s) for s in c.seeds)})" if c.n_seeds else "0",
              _range(*c.final_steps) if c.n_seeds else "n/a", str(c.n_failed),
              Link("failures and successes", examples_href(c.benchmark, c.arm))
              if (c.benchmark, c.arm) in linked else "none"]
             for c in an.accuracy]))
        doc.add(Para("Accuracy of a run = fraction of tasks correct at its last evaluated step, averaged over "
                     "its independent inference runs (eval.runs; crashes, timeouts and unscorable answers count as "
                     "incorrect, docs/evaluation.md); mean and sample std (ddof = 1) over seeds; the spread is the "
                     "sample std of the accuracy across a run's inference runs, averaged over seeds; the CI is a "
                     "seeded hierarchical bootstrap (seeds, then inference runs and tasks). Examples: a page per benchmark (examples-<benchmark>.html "
                     f"next to report.html) with, per run of the row, the first {EXAMPLES_PER_KIND} "
                     "failures and successes at that same last evaluated step, with their transcripts."))
    else:
        doc.add(Para("No eval records (eval/<step>/<benchmark>.jsonl) in any run: no accuracy "
                     "table. Evaluate with pytest benchmarks/ --trainer=<name>."))

    if an.unseen:
        doc.add(Heading(2, "Held-out accuracy on unseen worlds, before and after RL"))
        doc.add(Table(
            ["benchmark", "trainer", "before (step 0)", "after (mean ± std)", "after - before (mean ± std)",
             "gain > 2 std (after)", "per seed: before -> after", "tasks", "seeds", "final step"],
            [[r.benchmark, r.arm, f3(r.before),
              f"{f3(r.after)} ± {f3(r.after_std)}" if r.after_std == r.after_std else f3(r.after), _gain(r),
              {True: "yes", False: "no", None: "-"}[r.beyond_2sd],
              "; ".join(f"{s}: {f3(b)} -> {f3(a)}" for s, b, a in zip(r.seeds, r.befores, r.afters)), *_sizes(r)]
             for r in an.unseen]))
        doc.add(Para("Each run evaluated on worlds it never trained on (the config's eval.unseen: its world seeds, "
                     "the run's task styles and templates, a fixed number of sampled inference runs; python -m "
                     "harness eval-unseen, records in eval_unseen/<step>/<benchmark>.jsonl), once with the weights "
                     "it started from (step 0) and once after its last step, with the same sampling seeds. Per run "
                     "the mean over tasks and inference runs, then the mean and the sample std over seeds; failed "
                     "runs excluded. 'gain > 2 std' compares the mean gain with twice the seed-to-seed std of the "
                     "accuracy after training. The evaluation is fixed in the config before the runs; these "
                     "records never enter the accuracy table above, the curves or a verdict."))

    if an.in_distribution:
        doc.add(Heading(2, "In-distribution accuracy (training questions), before and after"))
        doc.add(Table(
            ["benchmark", "trainer", "before (step 0)", "after (last step)", "after - before (mean ± std)",
             "tasks", "seeds", "final step"],
            [[r.benchmark, r.arm, f3(r.before), f3(r.after), _gain(r), *_sizes(r)] for r in an.in_distribution]))
        doc.add(Para("The first eval.train_tasks training questions of each style, evaluated like the held-out tasks "
                     "before training and after the last step (records in eval_train/<step>/<benchmark>.jsonl): "
                     "whether RL learned what it trained on, as tests/harness/test_rl_works.py measures it. These "
                     "questions are never part of the held-out accuracy above or of any verdict; per run the mean "
                     "over tasks and inference runs, then the mean (and the sample std of after - before) over "
                     "seeds; failed runs excluded."))

    # -- curves
    doc.add(Heading(1, "Stability curves"))
    doc.add(Fig(fig["accuracy_curves"]), Fig(fig["reward_curves"]))
    doc.add(Heading(1, "Sample efficiency"))
    doc.add(Fig(fig["sample_efficiency"]))

    # -- diagnostics
    doc.add(Heading(1, "Per-agent diagnostics"))
    if an.diagnostics:
        doc.add(Table(
            ["trainer", "role", "runs", "final reward", "clip ratio", "entropy (nats/token)",
             "grad norm", "KL", "zero-std groups", "sub-calls/rollout", "wait (s/step)",
             "rollout (s/step)", "train (s/step)", "peak memory (MiB; GPU)", "duplicated (per step; total/run)",
             "dropped (per step; total/run)", "stale; left out (per step)"],
            [[d.arm, d.role, str(d.n_runs), f3(d.values["reward_mean"]),
              f3(d.values["clip_ratio"]), f3(d.values["entropy"]), f3(d.values["grad_norm"]),
              f3(d.values["kl"]), f3(d.values["frac_zero_std_groups"]),
              f3(d.values["sub_calls_mean"]), f3(d.values["wait_s"]), f3(d.values["rollout_s"]),
              f3(d.values["train_s"]), peak_text(d.values),
              f"{f3(d.values['align_duplicated_per_step'])}; {f3(d.values['align_duplicated_total'])}",
              f"{f3(d.values['align_dropped_per_step'])}; {f3(d.values['align_dropped_total'])}",
              f"{f3(d.values['stale_trajectories_per_step'])}; {f3(d.values['dropped_stale_per_step'])}"]
             for d in an.diagnostics]))
        doc.add(Para("Per run: mean over its last 10% of steps (counters: per step over the whole "
                     "run, and the run's total); then the mean over runs. n/a = not recorded. Peak memory: the role "
                     "process's peak resident memory (child processes such as Chromium not included) and, "
                     "with a GPU, its peak CUDA allocation. Stale: "
                     "sub-trajectories generated by an older policy version than the one they train; left "
                     "out: staler than sub.max_staleness (docs/training.md)."))
    else:
        doc.add(Para("No step records (<role>/metrics.jsonl) in any run."))
    if an.sub_calls:
        doc.add(Table(["trainer", "source", "rollouts", "mean sub-calls", "0.99 quantile (d)"],
                      [[h.arm, h.source, str(h.n_rollouts),
                        f3(float((h.counts * range(h.counts.size)).sum() / max(h.counts.sum(), 1))),
                        str(h.q99)] for h in an.sub_calls]))
    doc.add(Fig(fig["diagnostics"]), Fig(fig["sub_calls_hist"]))

    # -- collapse
    doc.add(Heading(1, "Collapse detection"))
    doc.add(Para(
        f"Rule: on each run's EMA-smoothed series (α = {smooth_text(opt.smooth, opt.smooth_auto)}), a collapse is a "
        f"series whose last two points are both more than {opt.collapse_margin:g} below its peak; "
        f"the reported step is where the last uninterrupted stretch below peak − margin began. "
        f"Dips that recover are not collapses. Series checked: training reward per role and accuracy per benchmark, "
        f"{an.n_series_checked} in all."))
    if an.collapses:
        doc.add(Table(["run", "trainer", "seed", "series", "peak (step)", "collapse step",
                       "final", "drop"],
                      [[c.run_id, c.arm, str(c.seed), c.series, f"{f3(c.peak)} ({c.peak_step})",
                        str(c.collapse_step), f3(c.final), f3(c.drop)] for c in an.collapses]))
    else:
        doc.add(Para(f"No collapse detected in {an.n_series_checked} series."))

    # -- provenance
    doc.add(Heading(1, "Runs and provenance"))
    doc.add(Table(["run", "trainer", "seed", "state", "last step per role", "eval steps",
                   "commit", "dirty", "created", "host", "schema", "notes"],
                  [_run_row(r) for r in ds.runs]))
    if ds.skipped:
        doc.add(Para(f"Folders of {ds.runs_dir} skipped (not read as runs):"),
                Bullets([f"{name}/: {why}" for name, why in ds.skipped]))
    for r in ds.runs:
        doc.add(Details(f"provenance of {r.run_id} ({r.arm}, seed {r.seed}, {r.state})",
                        pretty_json(r.provenance if r.provenance is not None
                                    else {"missing": "no provenance.json", "status": r.status})))
    doc.add(Heading(1, "How to read this report"))
    doc.add(Bullets([
        "Records only: every number comes from runs/<run_id>/<role>/metrics.jsonl and "
        "runs/<run_id>/eval/<step>/<benchmark>.jsonl (schemas in harness/records.py).",
        "Trainer column = arm: the trainer name, or <trainer>[alignment=none] for the Fig. 8 "
        "ablation (provenance config alignment: none).",
        "States: completed / failed / running from status.json, unknown when it is missing; "
        "'short' marks a run that stops before the other runs of its arm.",
        "Curves include failed runs up to where they stopped; bands need at least two seeds.",
        "The offline tiny-world results say nothing about the paper's scale (see docs/architecture.md §Making the tiny default learn).",
    ]))
    return doc


def _run_row(r: RunInfo) -> list[str]:
    prov = r.provenance or {}
    git = prov.get("git") or {}
    commit = git.get("commit")
    host = (prov.get("host") or {}).get("hostname") if isinstance(prov.get("host"), dict) \
        else prov.get("host")
    state = r.state + (" (short)" if r.short else "")
    return [r.run_id, r.arm, str(r.seed), state if not r.failed else "failed",
            ", ".join([f"{k}: {v}" for k, v in r.last_step.items()]
                      + (["sub: 0"] if r.sub_steps == 0 and "sub" not in r.last_step else [])) or "none",
            (f"{len(r.eval_steps)} ({r.eval_steps[0]}–{r.eval_steps[-1]})" if r.eval_steps else "0"),
            commit[:10] if isinstance(commit, str) else "unknown",
            {True: "yes", False: "no"}.get(git.get("dirty"), "unknown"),
            str(prov.get("created", "unknown")), str(host or "unknown"),
            ", ".join(str(s) for s in sorted(r.schemas)) or "n/a",
            "; ".join(r.notes) or ""]
