"""Numerical rules of the comparison report (docs/report.md): smoothing, across-seed curves, the seeded
bootstrap, the verdict rule for the paper's claims and the collapse rule.

Pure functions on numpy arrays (no I/O, no plotting, no torch), so each rule is testable alone.
The rules (also in docs/report.md):

- **EMA** (``--smooth ALPHA``), step-aware: ``s_0 = x_0``, ``s_i = s_{i-1} + w_i (x_i - s_{i-1})``
  with ``w_i = 1 - (1 - ALPHA) ** (step_i - step_{i-1})``: ALPHA is the weight of a point one
  optimizer step after the last, so per-step rewards and accuracy evaluated every 25 steps are
  smoothed over the same span of training (a plain per-point EMA with ALPHA = 0.05 would drag a
  21-point accuracy curve towards its first value). ``ALPHA = 1`` is no smoothing.
- **Across seeds**: mean and *sample* standard deviation (ddof = 1) of the seeds present at a step;
  a step seen by one seed has no band. (the population std of docs/paper.md is for advantages, not for reporting.)
- **Bootstrap** (hierarchical, seeded): resample the seeds with replacement and, inside each drawn
  seed, its inference runs (``eval.runs``, when more than one) and its tasks with replacement; the
  statistic is the mean over drawn seeds of per-seed accuracy. The 95% interval is the 2.5/97.5 percentile of the draws. With scalar per-seed values
  (training reward) only the seeds are resampled.
- **Verdict** of "A above B": d = mean(A) - mean(B) of the final per-seed values; the interval is
  the percentile interval of the difference of independent bootstrap draws of A and B.
  ``supported`` when d > 0 and the interval's lower end > 0; ``not supported`` when d <= 0;
  ``inconclusive`` when d > 0 but the interval contains 0; ``not run`` when either arm has no data.
- **Collapse**: on the EMA-smoothed series of one run, with peak p (first maximum): a collapse is a
  final value below p - margin that holds for at least the last two points (one bad final
  evaluation is not a collapse); its step is the first step of the last uninterrupted stretch
  below p - margin (after the peak). A dip that comes back above p - margin is not a collapse.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
NOT_RUN = "not run"
VERDICTS = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, NOT_RUN)


#: ``--smooth auto``: the EMA's span is this share of the longest run (in optimizer steps).
AUTO_SPAN_SHARE = 0.2


def auto_alpha(n_steps: int | None) -> float:
    """EMA weight scaled to the run length: a span of ``AUTO_SPAN_SHARE`` of ``n_steps`` steps, as
    ``alpha = 2 / (span + 1)`` (capped at 1). 6 steps -> 0.91 (almost raw: a short run has nothing to
    smooth), 100 -> 0.095, 1000 -> 0.01. A fixed 0.05 would keep a 6-step curve at its first value."""
    if not n_steps or n_steps <= 0:
        return 1.0
    return min(1.0, 2.0 / (AUTO_SPAN_SHARE * n_steps + 1.0))


def smooth_text(alpha: float, auto: bool) -> str:
    """How a figure caption or the settings line states the smoothing."""
    if auto:
        return (f"{alpha:.2g} per step, scaled to the run length: an EMA span of {AUTO_SPAN_SHARE:.0%} of the "
                "longest run's steps (--smooth auto)")
    return f"{alpha:g} per step"


def ema(values: Sequence[float] | np.ndarray, alpha: float,
        steps: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """Step-aware exponential moving average; NaNs carry the previous smoothed value.

    ``alpha`` is the weight of a new point one optimizer step after the previous one; a point
    ``gap`` steps later gets ``1 - (1 - alpha) ** gap``, so a reward logged every step and an
    accuracy evaluated every 25 steps are smoothed over the same span of training. Without
    ``steps`` every gap is 1 (a plain EMA).
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"smoothing alpha must be in (0, 1], got {alpha}")
    x = np.asarray(values, dtype=float)
    st = np.arange(x.size, dtype=float) if steps is None else np.asarray(steps, dtype=float)
    if st.shape != x.shape:
        raise ValueError(f"ema: {x.size} values but {st.size} steps")
    keep = 1.0 - alpha
    out = [0.0] * x.size
    s = math.nan
    last = math.nan
    # plain Python floats: numpy scalar arithmetic in a loop is several times slower
    for i, (v, t) in enumerate(zip(x.tolist(), st.tolist())):
        if v != v:  # NaN
            out[i] = s
            continue
        if s != s:
            s = v
        else:
            s += (1.0 - keep ** max(t - last, 1.0)) * (v - s)
        last = t
        out[i] = s
    return np.asarray(out, dtype=float)


def cell_rng(seed: int, *labels: str) -> np.random.Generator:
    """A generator seeded by the report seed and stable hashes of ``labels`` (a table cell)."""
    return np.random.default_rng([seed, *(zlib.crc32(lab.encode()) for lab in labels)])


def bootstrap_seed_task(per_seed: Sequence[np.ndarray], rng: np.random.Generator,
                        n_boot: int = 2000) -> np.ndarray:
    """Hierarchical bootstrap draws of the mean over seeds of per-seed means.

    ``per_seed[s]`` holds seed s's per-task outcomes (0/1), or a 2-D array of them, inference runs x
    tasks (the evaluation's ``eval.runs`` independent runs: inference runs and tasks are resampled
    too, so the decoding noise between runs widens the interval), or, as a length-1 array, a scalar
    per-seed value (then only seeds are resampled, as every inner draw is that value).
    """
    arrays = [np.asarray(a, dtype=float) for a in per_seed if np.size(a)]
    if not arrays:
        raise ValueError("bootstrap needs at least one seed with data")
    inner = np.empty((len(arrays), n_boot))
    for s, a in enumerate(arrays):
        if a.ndim == 2 and a.shape[0] > 1:
            rows = rng.integers(0, a.shape[0], size=(n_boot, a.shape[0]))
            cols = rng.integers(0, a.shape[1], size=(n_boot, a.shape[1]))
            inner[s] = a[rows[:, :, None], cols[:, None, :]].mean(axis=(1, 2))
            continue
        a = a.reshape(-1)
        if a.size == 1:
            inner[s] = a[0]
        else:
            idx = rng.integers(0, a.size, size=(n_boot, a.size))
            inner[s] = a[idx].mean(axis=1)
    n_seeds = len(arrays)
    if n_seeds == 1:
        return inner[0]
    pick = rng.integers(0, n_seeds, size=(n_boot, n_seeds))
    return inner[pick, np.arange(n_boot)[:, None]].mean(axis=1)


def percentile_ci(draws: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    lo, hi = np.percentile(draws, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample std (ddof = 1; NaN for a single value)."""
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return float("nan"), float("nan")
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else float("nan")


def verdict(diff: float, ci_low: float, ci_high: float) -> str:
    """The documented verdict of "A above B" from the mean difference and its interval."""
    if not np.isfinite(diff):
        return NOT_RUN
    if diff <= 0:
        return NOT_SUPPORTED
    return SUPPORTED if ci_low > 0 else INCONCLUSIVE


def combine_verdicts(verdicts: Sequence[str]) -> str:
    """All parts of an ordering claim: any not supported wins, then not run, then inconclusive."""
    for v in (NOT_SUPPORTED, NOT_RUN, INCONCLUSIVE):
        if v in verdicts:
            return v
    return SUPPORTED if verdicts else NOT_RUN


@dataclass
class Collapse:
    """A collapse found by :func:`detect_collapse` (values are EMA-smoothed)."""

    peak_step: int
    peak: float
    collapse_step: int
    final: float

    @property
    def drop(self) -> float:
        return self.peak - self.final


def detect_collapse(steps: Sequence[int] | np.ndarray, values: Sequence[float] | np.ndarray,
                    margin: float, alpha: float) -> Collapse | None:
    """Apply the collapse rule (module docstring) to one run's series; None if no collapse."""
    if margin <= 0:
        raise ValueError(f"collapse margin must be > 0, got {margin}")
    st = np.asarray(steps)
    v = np.asarray(values, dtype=float)
    keep = ~np.isnan(v)
    st, v = st[keep], v[keep]
    if v.size < 2:
        return None
    s = ema(v, alpha, st)
    peak_i = int(np.argmax(s))
    thr = s[peak_i] - margin
    if s[-1] >= thr or s[-2] >= thr:
        return None
    below = s < thr
    i = len(s) - 1
    while i > peak_i + 1 and below[i - 1]:
        i -= 1
    return Collapse(peak_step=int(st[peak_i]), peak=float(s[peak_i]),
                    collapse_step=int(st[i]), final=float(s[-1]))


def hist_quantile(hist: Sequence[int] | np.ndarray, q: float = 0.99) -> int | None:
    """Smallest d with P(X <= d) >= q for counts ``hist[i]`` of value i (None when empty)."""
    h = np.asarray(hist, dtype=float)
    total = h.sum()
    if total <= 0:
        return None
    cdf = np.cumsum(h) / total
    return int(np.searchsorted(cdf, q - 1e-12))
