"""The report's tables, computed from a loaded :class:`~harness.report.dataset.Dataset` (docs/report.md):
final accuracy per benchmark × arm, across-seed curves, the paper's claims with verdicts, collapse
detection and per-agent diagnostics. Numerical rules live in :mod:`harness.report.stats`.

Decisions where the paper is silent (also in docs/report.md):

- **Final accuracy** of a run on a benchmark is its accuracy at its own last eval step of that
  benchmark. The table averages over the arm's runs that did not fail; failed runs are counted in
  their own column. If the final steps differ between seeds the table shows the range.
- **Claims** compare final accuracy *pooled over the benchmarks both arms were evaluated on*
  (mean over benchmarks of the per-benchmark difference; the bootstrap draws are averaged the
  same way), within one family only (:func:`families`): the real benchmarks (the headline when
  present) and the offline ``local_*`` twins are pooled separately, never together; per-benchmark comparisons are listed as evidence, with how many common eval steps
  had the first arm's across-seed mean curve above the second's. When neither arm has eval
  records but both have training records, the metric falls back to the final planner training
  reward (mean of each run's last 10% of steps), bootstrapped over seeds only, and says so.
- An ordering of three arms (Fig. 7) is supported only if both of its pairs are; see
  :func:`harness.report.stats.combine_verdicts` for the precedence.
- **Curves** include failed runs up to where they stopped (they are measurements too).
- **Diagnostics** per arm × role: each run's mean over its last 10% of steps (at least one),
  then the mean over runs; alignment counters are mean per step over the whole run.
- **Caveats** (issue 14): a verdict is computed whatever the runs, but one resting on quick runs
  (a run's planner trained fewer than :data:`QUICK_STEPS` steps), on fewer than :data:`MIN_SEEDS`
  seeds of an arm, or on runs whose sub-agent did not train (``RunInfo.not_comparable``) carries
  that caveat: in the claims table, the report's caveat list and every console summary. Failed runs
  are left out of these counts as they are of the verdicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness.report import stats
from harness.report.dataset import Dataset, RunInfo, sort_arms

FINAL_WINDOW = 0.10
"""Fraction of a run's last steps averaged for 'final' training statistics."""
QUICK_STEPS = 10
"""A run whose planner trained fewer steps than this is a quick run: it checks the pipeline, claims no learning."""
MIN_SEEDS = 3
"""Fewer (non-failed) runs of an arm than this and its verdicts carry a caveat."""


@dataclass
class AccuracyCell:
    """Final accuracy of one arm on one benchmark (a row of the accuracy table)."""

    benchmark: str
    arm: str
    mean: float
    std: float
    """Sample std over seeds (NaN with one seed)."""
    ci_low: float
    ci_high: float
    n_seeds: int
    run_ids: list[str]
    seeds: list[int | None]
    values: list[float]
    """Per-run final accuracy, in ``run_ids`` order."""
    n_tasks: tuple[int, int]
    """Min and max number of distinct tasks in the final eval over the runs."""
    final_steps: tuple[int, int]
    n_failed: int
    """Failed runs of this arm with eval records of this benchmark, left out of the statistics."""
    n_inference_runs: tuple[int, int] = (1, 1)
    """Min and max number of independent inference runs in the final eval over the runs (``eval.runs``)."""
    run_spread: float = math.nan
    """Sample std of the accuracy across inference runs, averaged over seeds (NaN with one inference run)."""
    draws: np.ndarray = field(repr=False, default_factory=lambda: np.empty(0))


@dataclass
class Comparison:
    """One "better above worse" comparison, on one benchmark or pooled."""

    better: str
    worse: str
    scope: str
    """A benchmark name, or ``pooled (b1, b2, ...)``."""
    metric: str
    mean_better: float
    mean_worse: float
    diff: float
    ci_low: float
    ci_high: float
    n_better: int
    n_worse: int
    verdict: str
    steps_above: tuple[int, int] | None = None
    """(eval steps where better's mean curve is above worse's, common eval steps)."""


@dataclass
class Claim:
    """One of the paper's claims with its verdict and the numbers behind it."""

    key: str
    figure: str
    statement: str
    pairs: list[tuple[str, str]]
    verdict: str
    comparisons: list[Comparison]
    """Per pair: the pooled comparison first, then per-benchmark ones."""
    note: str = ""
    caveats: list[str] = field(default_factory=list)
    """Labels of the :class:`Caveat` s that concern the claim's arms (see :func:`caveats`)."""


CLAIMS: tuple[tuple[str, str, str, list[tuple[str, str]]], ...] = (
    ("fig6", "Fig. 6", "mgrpo is above frozen_sub on benchmark accuracy",
     [("mgrpo", "frozen_sub")]),
    ("fig7", "Fig. 7", "mgrpo > frozen_sub > single_agent",
     [("mgrpo", "frozen_sub"), ("frozen_sub", "single_agent")]),
    ("fig8", "Fig. 8", "mgrpo with trajectory alignment > mgrpo with alignment: none",
     [("mgrpo", "mgrpo[alignment=none]")]),
)


@dataclass
class CollapseRow:
    run_id: str
    arm: str
    seed: int | None
    series: str
    peak_step: int
    peak: float
    collapse_step: int
    final: float
    drop: float


@dataclass
class DiagnosticsRow:
    arm: str
    role: str
    n_runs: int
    values: dict[str, float]


@dataclass
class SubCallsHist:
    arm: str
    source: str
    """'training step records' or 'eval task records'."""
    counts: np.ndarray
    q99: int | None
    n_rollouts: int


@dataclass
class Caveat:
    """A reason to distrust the verdicts that involve ``arms``."""

    key: str
    """``quick``, ``few_seeds`` or ``sub_untrained``."""
    label: str
    """Short form for a verdict line, e.g. ``short runs``."""
    text: str
    """The full sentence (report and console)."""
    arms: list[str]


@dataclass
class InDistributionRow:
    """Accuracy of one arm on one benchmark before training (step 0) and after the run's last step, per run the mean
    over tasks and inference runs: the training questions (``eval.train_tasks``, in-distribution) or the held-out
    questions of worlds the run never trained on (``eval.unseen``)."""

    benchmark: str
    arm: str
    n_seeds: int
    seeds: list[int | None]
    before: float
    """Mean over runs of the step-0 accuracy."""
    after: float
    """Mean over runs of the accuracy at the run's last in-distribution evaluation."""
    diff_mean: float
    diff_std: float
    """Sample std (ddof = 1) over runs of after - before; nan with one run."""
    n_tasks: tuple[int, int]
    final_steps: tuple[int, int]
    befores: list[float] = field(default_factory=list)
    """Each run's step-0 accuracy, in the order of ``seeds``."""
    afters: list[float] = field(default_factory=list)
    """Each run's accuracy at its last step, in the order of ``seeds``."""
    after_std: float = float("nan")
    """Sample std (ddof = 1) over runs of the accuracy after training (seed-to-seed); nan with one run."""

    @property
    def beyond_2sd(self) -> bool | None:
        """Whether the mean gain exceeds twice the seed-to-seed std of the accuracy after training (issue 16's bar for
        an RL gain beyond seed noise); None with fewer than 2 runs."""
        if self.n_seeds < 2 or self.after_std != self.after_std:
            return None
        return self.diff_mean > 2 * self.after_std


@dataclass
class Analysis:
    accuracy: list[AccuracyCell]
    claims: list[Claim]
    collapses: list[CollapseRow]
    n_series_checked: int
    diagnostics: list[DiagnosticsRow]
    sub_calls: list[SubCallsHist]
    run_acc: pd.DataFrame
    """Accuracy per run_id, arm, seed, step, benchmark (mean over tasks) and n_tasks."""
    caveats: list[Caveat] = field(default_factory=list)
    in_distribution: list[InDistributionRow] = field(default_factory=list)
    unseen: list[InDistributionRow] = field(default_factory=list)
    """Held-out accuracy on unseen worlds before and after (``eval.unseen``)."""


DIAG_COLUMNS = ("reward_mean", "clip_ratio", "entropy", "grad_norm", "kl", "frac_zero_std_groups",
                "sub_calls_mean", "wait_s", "rollout_s", "train_s", "peak_rss_mib", "peak_gpu_mib")
COUNTER_COLUMNS = ("align_duplicated", "align_dropped", "stale_trajectories", "dropped_stale")


def analyse(ds: Dataset, *, smooth: float, collapse_margin: float, seed: int = 0,
            n_boot: int = 2000) -> Analysis:
    run_acc = run_accuracy(ds)
    acc = accuracy_table(ds, seed=seed, n_boot=n_boot)
    claims = evaluate_claims(ds, acc, run_acc, seed=seed, n_boot=n_boot)
    cav = caveats(ds)
    for cl in claims:
        arms = {a for pair in cl.pairs for a in pair}
        cl.caveats = [c.label for c in cav if arms & set(c.arms)]
    collapses, n_checked = find_collapses(ds, run_acc, margin=collapse_margin, alpha=smooth)
    return Analysis(accuracy=acc, claims=claims, collapses=collapses, n_series_checked=n_checked,
                    diagnostics=diagnostics(ds), sub_calls=sub_calls_hists(ds), run_acc=run_acc,
                    caveats=cav, in_distribution=before_after(ds, ds.indist), unseen=before_after(ds, ds.unseen))


def caveats(ds: Dataset) -> list[Caveat]:
    """What qualifies the verdicts: short runs, too few seeds, runs whose sub-agent did not train."""
    out: list[Caveat] = []
    ok = [r for r in ds.runs if not r.failed]
    quick: dict[str, list[int]] = {}
    for r in ok:
        steps = r.last_step.get("planner", r.max_step)
        if steps is not None and steps < QUICK_STEPS:
            quick.setdefault(r.arm, []).append(steps)
    if quick:
        n = sum(len(v) for v in quick.values())
        per = ", ".join(f"{a}: {len(v)} run(s) of at most {max(v)} steps" for a, v in
                        ((a, quick[a]) for a in sort_arms(list(quick))))
        out.append(Caveat("quick", "short runs",
                          f"short runs: {n} run(s) trained fewer than {QUICK_STEPS} planner steps ({per}); "
                          f"such runs check the pipeline and claim no learning", sort_arms(list(quick))))
    seeds: dict[str, int] = {}
    for r in ok:
        seeds[r.arm] = seeds.get(r.arm, 0) + 1
    few = [a for a in sort_arms(list(seeds)) if seeds[a] < MIN_SEEDS]
    if few:
        out.append(Caveat("few_seeds", f"fewer than {MIN_SEEDS} seeds",
                          f"fewer than {MIN_SEEDS} seeds: {', '.join(f'{a} {seeds[a]}' for a in few)} "
                          f"run(s) (failed runs not counted); intervals over so few seeds say little", few))
    untrained = [r for r in ok if r.not_comparable]
    if untrained:
        arms = sort_arms(list({r.arm for r in untrained}))
        per = "; ".join(f"{r.run_id}: {r.not_comparable}" for r in untrained)
        totals = ", ".join(f"{sum(r.arm == a for r in untrained)} of {seeds[a]} {a}" for a in arms)
        out.append(Caveat("sub_untrained", "sub-agent did not train",
                          f"sub-agent did not train in {totals} run(s), not comparable ({per}): "
                          f"such a run is a frozen_sub run under another name", arms))
    return out


def run_accuracy(ds: Dataset) -> pd.DataFrame:
    ev = ds.evals
    if not len(ev):
        return pd.DataFrame(columns=["run_id", "arm", "seed", "step", "benchmark", "acc", "n_tasks"])
    # the mean over every task and inference run of the evaluation
    g = ev.groupby(["run_id", "step", "benchmark"], sort=True).agg(acc=("correct", "mean"), n_tasks=("task_id", "nunique"))
    out = g.reset_index()
    arm_of = {r.run_id: r.arm for r in ds.runs}
    seed_of = {r.run_id: r.seed for r in ds.runs}
    out["arm"] = out["run_id"].map(arm_of)
    out["seed"] = out["run_id"].map(seed_of)
    return out


def task_matrix(rows: pd.DataFrame) -> np.ndarray:
    """One run's evaluation as inference runs x tasks of 0/1 (a task missing from an inference run counts as
    incorrect)."""
    return rows.pivot_table(index="inference_run", columns="task_id", values="correct", aggfunc="mean",
                            fill_value=0.0).to_numpy(float)


def before_after(ds: Dataset, ev: pd.DataFrame) -> list[InDistributionRow]:
    """Per arm and benchmark, the accuracy of the task records ``ev`` (``ds.indist``: in-distribution; ``ds.unseen``:
    unseen worlds) before (step 0) and after (each run's last evaluated step) training, over the runs that are not
    failed and hold both; a task missing from an inference run counts as incorrect, as in :func:`accuracy_table`."""
    if not len(ev):
        return []
    failed = {r.run_id for r in ds.runs if r.failed}
    runs = {r.run_id: r for r in ds.runs}

    out: list[InDistributionRow] = []
    for bench in sorted(ev["benchmark"].unique()):
        eb = ev[ev["benchmark"] == bench]
        for arm in ds.arms():
            ea = eb[eb["arm"] == arm]
            befores, afters, sizes, steps, seeds = [], [], [], [], []
            for rid in sorted(ea["run_id"].unique(), key=lambda r: (runs[r].seed is None, runs[r].seed, r)):
                er = ea[ea["run_id"] == rid]
                last = int(er["step"].max())
                if rid in failed or last == 0 or not (er["step"] == 0).any():
                    continue
                befores.append(float(task_matrix(er[er["step"] == 0]).mean()))
                afters.append(float(task_matrix(er[er["step"] == last]).mean()))
                sizes.append(int(er.loc[er["step"] == last, "task_id"].nunique()))
                steps.append(last)
                seeds.append(runs[rid].seed)
            if not befores:
                continue
            diffs = [a - b for a, b in zip(afters, befores)]
            d_mean, d_std = stats.mean_std(diffs)
            out.append(InDistributionRow(
                benchmark=bench, arm=arm, n_seeds=len(befores), seeds=seeds, before=float(np.mean(befores)),
                after=float(np.mean(afters)), diff_mean=d_mean, diff_std=d_std, n_tasks=(min(sizes), max(sizes)),
                final_steps=(min(steps), max(steps)), befores=befores, afters=afters,
                after_std=stats.mean_std(afters)[1]))
    return out


def accuracy_table(ds: Dataset, *, seed: int = 0, n_boot: int = 2000) -> list[AccuracyCell]:
    ev = ds.evals
    if not len(ev):
        return []
    last = ev.groupby(["run_id", "benchmark"])["step"].transform("max")
    final = ev[ev["step"] == last]
    failed = {r.run_id for r in ds.runs if r.failed}
    runs = {r.run_id: r for r in ds.runs}
    cells: list[AccuracyCell] = []
    for bench in sorted(final["benchmark"].unique()):
        fb = final[final["benchmark"] == bench]
        for arm in ds.arms():
            fa = fb[fb["arm"] == arm]
            if not len(fa):
                continue
            ids = [rid for rid in sorted(fa["run_id"].unique(), key=lambda r: (runs[r].seed is None, runs[r].seed, r))]
            ok = [rid for rid in ids if rid not in failed]
            n_failed = len(ids) - len(ok)
            if not ok:
                cells.append(AccuracyCell(bench, arm, math.nan, math.nan, math.nan, math.nan, 0,
                                          [], [], [], (0, 0), (0, 0), n_failed))
                continue
            per_run = [task_matrix(fa[fa["run_id"] == rid]) for rid in ok]
            values = [float(a.mean()) for a in per_run]
            mean, std = stats.mean_std(values)
            draws = stats.bootstrap_seed_task(per_run, stats.cell_rng(seed, "acc", bench, arm), n_boot)
            lo, hi = stats.percentile_ci(draws)
            steps = [int(fa.loc[fa["run_id"] == rid, "step"].iloc[0]) for rid in ok]
            sizes = [a.shape[1] for a in per_run]
            n_inf = [a.shape[0] for a in per_run]
            spreads = [float(np.std(a.mean(axis=1), ddof=1)) for a in per_run if a.shape[0] > 1]
            cells.append(AccuracyCell(
                benchmark=bench, arm=arm, mean=mean, std=std, ci_low=lo, ci_high=hi,
                n_seeds=len(ok), run_ids=ok, seeds=[runs[r].seed for r in ok], values=values,
                n_tasks=(min(sizes), max(sizes)), final_steps=(min(steps), max(steps)),
                n_failed=n_failed, n_inference_runs=(min(n_inf), max(n_inf)),
                run_spread=float(np.mean(spreads)) if spreads else math.nan, draws=draws))
    return cells


def curve(df: pd.DataFrame, value: str, *, alpha: float | None = None,
          by: str = "run_id") -> pd.DataFrame:
    """Across-run mean, sample std and count per step of ``value`` (EMA per run first if alpha).

    numpy instead of a pandas groupby/transform: this runs for every line of every figure.
    """
    if not len(df):
        return pd.DataFrame({"step": [], "mean": [], "std": [], "n": []})
    codes = pd.factorize(df[by])[0]
    steps = df["step"].to_numpy()
    v = df[value].to_numpy(dtype=float, na_value=np.nan).copy()
    order = np.lexsort((steps, codes))
    codes, steps, v = codes[order], steps[order], v[order]
    if alpha is not None and alpha < 1:
        bounds = np.flatnonzero(np.diff(codes)) + 1
        for seg in np.split(np.arange(v.size), bounds):
            v[seg] = stats.ema(v[seg], alpha, steps[seg])
    keep = ~np.isnan(v)
    steps, v = steps[keep], v[keep]
    if not v.size:
        return pd.DataFrame({"step": [], "mean": [], "std": [], "n": []})
    ustep, inv = np.unique(steps, return_inverse=True)
    n = np.bincount(inv)
    mean = np.bincount(inv, v) / n
    ss = np.bincount(inv, (v - mean[inv]) ** 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.where(n > 1, np.sqrt(ss / np.maximum(n - 1, 1)), np.nan)
    return pd.DataFrame({"step": ustep, "mean": mean, "std": std, "n": n})


def _compare(better: str, worse: str, scope: str, metric: str, draws_b: np.ndarray,
             draws_w: np.ndarray, mean_b: float, mean_w: float, n_b: int, n_w: int,
             steps_above: tuple[int, int] | None) -> Comparison:
    diff = mean_b - mean_w
    lo, hi = stats.percentile_ci(draws_b - draws_w)
    return Comparison(better, worse, scope, metric, mean_b, mean_w, diff, lo, hi, n_b, n_w,
                      stats.verdict(diff, lo, hi), steps_above)


def _not_run(better: str, worse: str, why: str) -> Comparison:
    nan = math.nan
    return Comparison(better, worse, why, "-", nan, nan, nan, nan, nan, 0, 0, stats.NOT_RUN)


def arm_curves(run_acc: pd.DataFrame) -> dict[tuple[str, str], dict[int, float]]:
    """(arm, benchmark) -> {eval step: across-seed mean accuracy} (all runs, failed included)."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    if not len(run_acc):
        return out
    g = run_acc.groupby(["arm", "benchmark", "step"], sort=True)["acc"].mean()
    for (arm, bench, step), v in zip(g.index, g.to_numpy(float)):
        out.setdefault((str(arm), str(bench)), {})[int(step)] = float(v)
    return out


def _steps_above(curves: dict[tuple[str, str], dict[int, float]], a: str, b: str,
                 benches: list[str]) -> tuple[int, int]:
    """Eval steps (present for both arms on every benchmark) where a's pooled mean is above b's."""
    common: set[int] | None = None
    for bench in benches:
        s = set(curves.get((a, bench), {})) & set(curves.get((b, bench), {}))
        common = s if common is None else common & s
    if not common:
        return (0, 0)
    above = sum(np.mean([curves[(a, x)][st] for x in benches])
                > np.mean([curves[(b, x)][st] for x in benches]) for st in common)
    return int(above), len(common)


def family(benchmark: str) -> str:
    """``local`` for the offline world's ``local_*`` twins, ``real`` for GAIA, XBench-DeepSearch, WebWalkerQA."""
    return "local" if benchmark.startswith("local_") else "real"


def families(benches: list[str]) -> list[list[str]]:
    """``benches`` split by :func:`family`, the real benchmarks first; empty families left out. Accuracy is
    pooled within a family only: a real benchmark's number and a tiny offline world's never share a mean."""
    out = [[b for b in benches if family(b) == f] for f in ("real", "local")]
    return [f for f in out if f]


def _final_reward(ds: Dataset, arm: str) -> list[float]:
    st = ds.steps
    ok = [r.run_id for r in ds.runs if r.arm == arm and not r.failed]
    out: list[float] = []
    for rid in ok:
        s = st[(st["run_id"] == rid) & (st["role"] == "planner")]["reward_mean"].dropna()
        if len(s):
            k = max(1, math.ceil(FINAL_WINDOW * len(s)))
            out.append(float(s.iloc[-k:].mean()))
    return out


def compare_pair(ds: Dataset, acc: list[AccuracyCell], run_acc: pd.DataFrame, better: str,
                 worse: str, *, seed: int, n_boot: int) -> list[Comparison]:
    """Pooled comparison first, then one per common benchmark (or the reward fallback)."""
    arms = set(ds.arms())
    missing = [a for a in (better, worse) if a not in arms]
    if missing:
        return [_not_run(better, worse, f"no runs of {', '.join(missing)}")]
    curves = arm_curves(run_acc)
    cb = {c.benchmark: c for c in acc if c.arm == better and c.n_seeds}
    cw = {c.benchmark: c for c in acc if c.arm == worse and c.n_seeds}
    benches = sorted(set(cb) & set(cw))
    if benches:
        per = [_compare(better, worse, b, "final accuracy", cb[b].draws, cw[b].draws, cb[b].mean,
                        cw[b].mean, cb[b].n_seeds, cw[b].n_seeds,
                        _steps_above(curves, better, worse, [b])) for b in benches]
        # one pooled comparison per family, the real benchmarks' first (the headline): never real with local
        pooled = [_compare(
            better, worse, f"pooled ({', '.join(fam)})", "final accuracy, mean over benchmarks",
            np.mean([cb[b].draws for b in fam], axis=0),
            np.mean([cw[b].draws for b in fam], axis=0),
            float(np.mean([cb[b].mean for b in fam])), float(np.mean([cw[b].mean for b in fam])),
            min(cb[b].n_seeds for b in fam), min(cw[b].n_seeds for b in fam),
            _steps_above(curves, better, worse, fam)) for fam in families(benches)]
        return [*pooled, *per] if len(per) > 1 else pooled
    if cb or cw:
        return [_not_run(better, worse, "no benchmark evaluated for both arms")]
    rb, rw = _final_reward(ds, better), _final_reward(ds, worse)
    if rb and rw:
        db = stats.bootstrap_seed_task([np.array([v]) for v in rb],
                                       stats.cell_rng(seed, "reward", better), n_boot)
        dw = stats.bootstrap_seed_task([np.array([v]) for v in rw],
                                       stats.cell_rng(seed, "reward", worse), n_boot)
        return [_compare(better, worse, "training (no eval records)",
                         "final planner training reward (last 10% of steps)", db, dw,
                         float(np.mean(rb)), float(np.mean(rw)), len(rb), len(rw), None)]
    return [_not_run(better, worse, "no completed runs with records for both arms")]


def evaluate_claims(ds: Dataset, acc: list[AccuracyCell], run_acc: pd.DataFrame, *, seed: int = 0,
                    n_boot: int = 2000) -> list[Claim]:
    claims: list[Claim] = []
    for key, fig, statement, pairs in CLAIMS:
        comps: list[Comparison] = []
        pair_verdicts: list[str] = []
        for better, worse in pairs:
            cs = compare_pair(ds, acc, run_acc, better, worse, seed=seed, n_boot=n_boot)
            comps.extend(cs)
            pair_verdicts.append(cs[0].verdict)
        claims.append(Claim(key, fig, statement, list(pairs), stats.combine_verdicts(pair_verdicts),
                            comps))
    return claims


def find_collapses(ds: Dataset, run_acc: pd.DataFrame, *, margin: float,
                   alpha: float) -> tuple[list[CollapseRow], int]:
    rows: list[CollapseRow] = []
    n = 0
    st = ds.steps
    for r in ds.runs:
        series: list[tuple[str, np.ndarray, np.ndarray]] = []
        if len(st):
            sr = st[st["run_id"] == r.run_id]
            for role in r.roles:
                s = sr[sr["role"] == role]
                series.append((f"training reward ({role})", s["step"].to_numpy(),
                               s["reward_mean"].to_numpy(float)))
        if len(run_acc):
            ra = run_acc[run_acc["run_id"] == r.run_id]
            for bench in sorted(ra["benchmark"].unique()):
                s = ra[ra["benchmark"] == bench]
                series.append((f"accuracy ({bench})", s["step"].to_numpy(), s["acc"].to_numpy(float)))
        for name, x, y in series:
            n += 1
            c = stats.detect_collapse(x, y, margin, alpha)
            if c is not None:
                rows.append(CollapseRow(r.run_id, r.arm, r.seed, name, c.peak_step, c.peak,
                                        c.collapse_step, c.final, c.drop))
    return rows, n


def diagnostics(ds: Dataset) -> list[DiagnosticsRow]:
    st = ds.steps
    out: list[DiagnosticsRow] = []
    if not len(st):
        return out
    for arm in ds.arms():
        sa = st[st["arm"] == arm]
        for role in sorted(sa["role"].unique(), key=lambda x: (x != "planner", x)):
            s = sa[sa["role"] == role]
            per_run: list[dict[str, float]] = []
            for _, g in s.groupby("run_id", sort=True):
                k = max(1, math.ceil(FINAL_WINDOW * len(g)))
                tail = g.iloc[-k:]
                vals = {c: float(tail[c].mean()) for c in DIAG_COLUMNS}
                for c in COUNTER_COLUMNS:
                    vals[c + "_per_step"] = float(g[c].mean())
                    vals[c + "_total"] = float(g[c].sum(min_count=1))
                per_run.append(vals)
            keys = per_run[0].keys()
            means = {k: float(np.nanmean([v[k] for v in per_run]))
                     if any(not math.isnan(v[k]) for v in per_run) else math.nan for k in keys}
            out.append(DiagnosticsRow(arm, role, len(per_run), means))
    return out


def sub_calls_hists(ds: Dataset) -> list[SubCallsHist]:
    out: list[SubCallsHist] = []
    for arm in ds.arms():
        runs: list[RunInfo] = [r for r in ds.runs if r.arm == arm]
        hists = [r.sub_calls_hist for r in runs if r.sub_calls_hist is not None]
        source = "training step records"
        if hists:
            n = max(h.size for h in hists)
            counts = np.sum([np.pad(h, (0, n - h.size)) for h in hists], axis=0)
        else:
            ev = ds.evals
            vals = ev.loc[ev["arm"] == arm, "n_sub_calls"].dropna().astype(int).to_numpy() \
                if len(ev) else np.empty(0, int)
            if not vals.size:
                continue
            counts = np.bincount(vals).astype(float)
            source = "eval task records"
        if counts[1:].sum() <= 0:  # an arm that never delegates (single_agent) has nothing to show
            continue
        out.append(SubCallsHist(arm, source, counts, stats.hist_quantile(counts, 0.99),
                                int(counts.sum())))
    return out
