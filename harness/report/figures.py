"""Figures of the comparison report (docs/report.md; curves as in arXiv 2511.13288 Fig. 6-8).

Uses matplotlib's object API (``Figure`` + Agg canvas, no pyplot state), so it is safe to call
repeatedly in one process. Every figure is returned with :class:`FigureInfo` metadata read back
from the drawn matplotlib axes (titles, axis labels with units, legend entries), which the tests
check and the HTML uses for alt text.

Figures: ``accuracy_curves`` (eval accuracy vs step, a panel per benchmark), ``reward_curves``
(training reward vs step, a panel per role), ``sample_efficiency`` (accuracy, mean over
benchmarks, vs trajectories and vs model tokens seen), ``diagnostics`` (per-agent training
diagnostics vs step), ``sub_calls_hist`` (sub-agent calls per rollout with the 0.99 quantile).

In a curve panel each arm has a thin line (raw mean over seeds) with a ±1 sample-std band (needs
>= 2 seeds) and a bold line (EMA-smoothed per run, then averaged). Raw and smoothed share a panel
(as the paper's Fig. 6/7 overlay) rather than doubling the panels: text layout is most of
matplotlib's cost and the report must stay under 10 s for 3 trainers × 3 seeds × 500 steps.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")  # before any backend is touched; the report never opens a window

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from harness.report.analysis import Analysis, curve, families  # noqa: E402
from harness.report.dataset import FORMAT_COLUMN, Dataset  # noqa: E402
from harness.report.stats import smooth_text  # noqa: E402

DPI = 90
STEP_LABEL = "step (optimizer steps)"
ACC_LABEL = "accuracy (fraction correct)"
REWARD_LABEL = "training reward (mean per trajectory)"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")
ROLE_STYLE = {"planner": "-", "sub": "--"}


@dataclass
class PanelInfo:
    """What one drawn axes shows (read back from matplotlib)."""

    title: str
    xlabel: str
    ylabel: str
    legend: list[str]
    n_lines: int
    has_data: bool


@dataclass
class FigureInfo:
    name: str
    title: str
    caption: str
    panels: list[PanelInfo]
    legend: list[str] = field(default_factory=list)
    """Entries of the figure's legend (one legend per figure, right of the panels)."""
    png: bytes = field(repr=False, default=b"")

    @property
    def filename(self) -> str:
        return f"{self.name}.png"


def colors(arms: list[str]) -> dict[str, str]:
    return {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(arms)}


def _finish(fig: Figure, name: str, title: str, caption: str) -> FigureInfo:
    fig.suptitle(title, fontsize=11)
    panels = []
    for ax in fig.axes:
        leg = ax.get_legend()
        labels = [t.get_text() for t in leg.get_texts()] if leg is not None else []
        has = bool(ax.lines or ax.patches or ax.collections)
        panels.append(PanelInfo(ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), labels,
                                len(ax.lines), has))
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    buf = io.BytesIO()
    FigureCanvasAgg(fig)
    fig.savefig(buf, format="png", dpi=DPI)
    return FigureInfo(name, title, caption, panels, legend, buf.getvalue())


def _no_data(ax, xlabel: str, ylabel: str, title: str, why: str = "no records") -> None:
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, color="0.4")


def _raw_and_smooth(ax, d: pd.DataFrame, value: str, alpha: float, color: str, label: str) -> None:
    """Thin raw mean with ±std band, bold EMA mean; only the bold line carries the arm label."""
    raw = curve(d, value)
    if not len(raw):
        return
    x = raw["step"].to_numpy(float)
    m = raw["mean"].to_numpy(float)
    sd = raw["std"].to_numpy(float)
    ax.plot(x, m, "-", color=color, lw=0.7, alpha=0.45)
    if np.isfinite(sd).any():
        ax.fill_between(x, m - np.nan_to_num(sd), m + np.nan_to_num(sd), color=color, alpha=0.15,
                        lw=0)
    sm = curve(d, value, alpha=alpha)
    ax.plot(sm["step"].to_numpy(float), sm["mean"].to_numpy(float), "-", color=color, lw=1.8,
            label=label)


def _fig_legend(fig: Figure, axes: np.ndarray, extra: list[tuple[str, dict]] | None = None) -> None:
    """One legend for the whole figure, right of the panels: entries from every panel (deduped by
    label, first wins) plus ``extra`` style proxies (label, Line2D kwargs)."""
    from matplotlib.lines import Line2D

    handles: dict[str, object] = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    for lab, kw in extra or []:
        handles.setdefault(lab, Line2D([], [], **kw))
    if not handles:
        return
    right = fig.subplotpars.right
    fig.legend(list(handles.values()), list(handles), loc="upper left", fontsize=7,
               bbox_to_anchor=(right + 0.1 / fig.get_figwidth(), fig.subplotpars.top),
               frameon=False)


def _style_proxies(alpha: float) -> list[tuple[str, dict]]:
    return [("thin: raw mean ± 1 std", {"color": "0.5", "lw": 0.7}),
            (f"bold: EMA α={alpha:g}/step", {"color": "0.5", "lw": 1.8})]


LEGEND_W = 2.4
"""Inches right of the panels reserved for the figure legend."""


def _grid(n_rows: int, n_cols: int, w: float = 4.0, h: float = 3.2) -> tuple[Figure, np.ndarray]:
    # Fixed margins instead of constrained layout: layout solving re-measures every text
    # artist and was half of the report's run time (3 trainers x 3 seeds x 500 steps).
    fig_w, fig_h = w * n_cols + LEGEND_W, h * n_rows + 0.5
    fig = Figure(figsize=(fig_w, fig_h))
    fig.subplots_adjust(left=0.7 / fig_w, right=1 - (LEGEND_W + 0.1) / fig_w, bottom=0.55 / fig_h,
                        top=1 - 0.7 / fig_h, wspace=0.9 / (w - 0.9), hspace=1.0 / (h - 1.0))
    axes = np.atleast_2d(fig.subplots(n_rows, n_cols, squeeze=False))
    return fig, axes


def _seed_label(ds: Dataset, arm: str) -> str:
    n = sum(1 for r in ds.runs if r.arm == arm)
    return f"{arm} (n={n})"


def _labels(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)


def accuracy_curves(ds: Dataset, an: Analysis, alpha: float, auto: bool = False) -> FigureInfo:
    ra = an.run_acc
    benches = sorted(ra["benchmark"].unique()) if len(ra) else []
    col = colors(ds.arms())
    fig, axes = _grid(1, max(1, len(benches)))
    if not benches:
        _no_data(axes[0, 0], STEP_LABEL, ACC_LABEL, "eval accuracy", "no eval records")
    for ax, bench in zip(axes.flat, benches):
        rb = ra[ra["benchmark"] == bench]
        for arm in ds.arms():
            d = rb[rb["arm"] == arm]
            if len(d):
                _raw_and_smooth(ax, d, "acc", alpha, col[arm], _seed_label(ds, arm))
        _labels(ax, f"{bench}", STEP_LABEL, ACC_LABEL)
        ax.set_ylim(-0.02, 1.02)
    _fig_legend(fig, axes, _style_proxies(alpha))
    return _finish(fig, "accuracy_curves", "Eval accuracy against step (mean ± std over seeds)",
                   "Benchmark accuracy at each evaluated step, a panel per benchmark: thin line = "
                   "raw mean over seeds with a ±1 sample-std band, bold line = EMA-smoothed per run "
                   f"(α = {smooth_text(alpha, auto)}) then averaged (cf. paper Fig. 6/7).")


def reward_curves(ds: Dataset, alpha: float, auto: bool = False) -> FigureInfo:
    st = ds.steps
    roles = sorted(st["role"].unique(), key=lambda r: (r != "planner", r)) if len(st) else []
    col = colors(ds.arms())
    fig, axes = _grid(1, max(1, len(roles)))
    if not roles:
        _no_data(axes[0, 0], STEP_LABEL, REWARD_LABEL, "training reward", "no step records")
    for ax, role in zip(axes.flat, roles):
        sr = st[st["role"] == role]
        for arm in ds.arms():
            d = sr[sr["arm"] == arm]
            if len(d) and d["reward_mean"].notna().any():
                _raw_and_smooth(ax, d, "reward_mean", alpha, col[arm], _seed_label(ds, arm))
            if len(d) and FORMAT_COLUMN in d and d[FORMAT_COLUMN].notna().any():
                cf = curve(d, FORMAT_COLUMN, alpha=alpha)
                ax.plot(cf["step"], cf["mean"], ":", color=col[arm], lw=1.3)
        _labels(ax, f"{role} training reward", STEP_LABEL, REWARD_LABEL)
    _fig_legend(fig, axes, _style_proxies(alpha) + [("dotted: well-formed share",
                                                     {"color": "0.5", "ls": ":"})])
    return _finish(fig, "reward_curves", "Training reward against step (mean ± std over seeds)",
                   "Mean training reward of each role's optimizer steps (R_M for the planner, R_S "
                   "for the sub-agent): thin = raw mean over seeds ± 1 sample std, bold = "
                   f"EMA-smoothed per run (α = {smooth_text(alpha, auto)}) then averaged (cf. paper Fig. 5, 8); "
                   "dotted = the steps' share of well-formed trajectories (the reward's format part), smoothed "
                   "the same way: the reward rises with it while the format is being learned.")


def _cumulative(ds: Dataset) -> pd.DataFrame:
    """Per run and step: cumulative planner trajectories (K per query: the same data budget for
    every trainer) and cumulative model tokens of all roles (the compute spent)."""
    st = ds.steps
    if not len(st):
        return pd.DataFrame(columns=["run_id", "step", "traj", "tokens"])
    d = st[["run_id", "step", "role", "n_trajectories", "n_model_tokens"]].copy()
    d["traj"] = d["n_trajectories"].where(d["role"] == "planner")
    g = d.groupby(["run_id", "step"])[["traj", "n_model_tokens"]].sum(min_count=1)
    g = g.fillna(0).groupby(level="run_id").cumsum().reset_index()
    return g.rename(columns={"n_model_tokens": "tokens"})


def sample_efficiency(ds: Dataset, an: Analysis) -> FigureInfo:
    """Accuracy (mean over the benchmarks of each eval) vs cumulative trajectories / tokens."""
    ra = an.run_acc
    cum = _cumulative(ds)
    col = colors(ds.arms())
    xlabels = {"traj": "planner trajectories seen (count)",
               "tokens": "model tokens seen (count, all roles)"}
    ylabel = "accuracy (fraction correct, mean over benchmarks)"
    fig, axes = _grid(1, 2)
    if not len(ra) or not len(cum):
        for ax, k in zip(axes.flat, ("traj", "tokens")):
            _no_data(ax, xlabels[k], ylabel, f"accuracy vs {k}", "needs eval and step records")
    else:
        # within one family (the offline local_* twins when a run has them, else the real benchmarks)
        fams = families(sorted(ra["benchmark"].unique()))
        fam = fams[-1] if fams else []
        ra = ra[ra["benchmark"].isin(fam)]
        ylabel = f"accuracy (fraction correct, mean over {', '.join(fam)})"
        pooled = ra.groupby(["run_id", "step"], sort=True)["acc"].mean().reset_index()
        pooled["arm"] = pooled["run_id"].map({r.run_id: r.arm for r in ds.runs})
        pooled["traj"] = 0.0
        pooled["tokens"] = 0.0
        for rid, idx in pooled.groupby("run_id").groups.items():
            c = cum[cum["run_id"] == rid]
            if not len(c):
                continue
            # cumulative count at an eval step: the last training step <= the eval step
            pos = np.searchsorted(c["step"].to_numpy(), pooled.loc[idx, "step"].to_numpy(),
                                  side="right") - 1
            for k in ("traj", "tokens"):
                vals = c[k].to_numpy(float)
                pooled.loc[idx, k] = np.where(pos >= 0, vals[np.clip(pos, 0, None)], 0.0)
        for ax, k in zip(axes.flat, ("traj", "tokens")):
            for arm in ds.arms():
                d = pooled[pooled["arm"] == arm]
                if not len(d):
                    continue
                g = d.groupby("step").agg(mean=("acc", "mean"), std=("acc", "std"),
                                          x=(k, "mean")).reset_index()
                x = g["x"].to_numpy(float)
                m = g["mean"].to_numpy(float)
                sd = np.nan_to_num(g["std"].to_numpy(float))
                ax.plot(x, m, "-o", ms=2.5, color=col[arm], lw=1.5, label=_seed_label(ds, arm))
                ax.fill_between(x, m - sd, m + sd, color=col[arm], alpha=0.15, lw=0)
            _labels(ax, f"accuracy vs {'trajectories' if k == 'traj' else 'model tokens'}",
                    xlabels[k], ylabel)
            ax.set_ylim(-0.02, 1.02)
    _fig_legend(fig, axes, [("band: ±1 std over seeds", {"color": "0.5", "lw": 6, "alpha": 0.2})])
    return _finish(fig, "sample_efficiency", "Sample efficiency: accuracy against data seen",
                   "Eval accuracy (mean over the benchmarks of each evaluation) against the "
                   "cumulative planner trajectories (the same data budget for every trainer) and "
                   "the cumulative model tokens of all roles (compute) consumed by optimizer steps "
                   "up to the evaluated step; x = mean over seeds, band = ±1 sample std.")


DIAG_PANELS = (
    ("clip_ratio", "clip ratio (fraction of tokens)"),
    ("entropy", "entropy (nats/token)"),
    ("grad_norm", "grad norm (L2)"),
    ("wait_s", "wait time (s per step)"),
    ("sub_calls_mean", "sub-agent calls per rollout (count)"),
    ("align_duplicated", "sub-trajectories per step (count)"),
)
_EXTRA_LINE = {"sub_calls_mean": ("sub_calls_p99", "p99"), "align_duplicated": ("align_dropped", "dropped")}
_PANEL_TITLE = {"sub_calls_mean": "sub-agent calls per rollout (mean; dotted: p99)",
                "align_duplicated": "alignment: duplicated (dotted: dropped)"}


def diagnostics(ds: Dataset, alpha: float, auto: bool = False) -> FigureInfo:
    st = ds.steps
    col = colors(ds.arms())
    fig, axes = _grid(2, 3, w=4.0, h=3.0)
    for ax, (c, label) in zip(axes.flat, DIAG_PANELS):
        drew = False
        if len(st):
            for arm in ds.arms():
                sa = st[st["arm"] == arm]
                for role in sorted(sa["role"].unique(), key=lambda r: (r != "planner", r)):
                    d = sa[sa["role"] == role]
                    if not d[c].notna().any():
                        continue
                    cv = curve(d, c, alpha=alpha)
                    ax.plot(cv["step"], cv["mean"], ROLE_STYLE.get(role, "-."), color=col[arm],
                            lw=1.1, label=f"{arm} / {role}")
                    extra = _EXTRA_LINE.get(c)
                    if extra and d[extra[0]].notna().any():
                        cq = curve(d, extra[0], alpha=alpha)
                        ax.plot(cq["step"], cq["mean"], ":", color=col[arm], lw=1.1)
                    drew = True
        title = _PANEL_TITLE.get(c, label.split(" (")[0])
        if drew:
            _labels(ax, title, STEP_LABEL, label)
        else:
            _no_data(ax, STEP_LABEL, label, title, "not recorded")
    _fig_legend(fig, axes, [("dotted: second quantity of the panel", {"color": "0.5", "ls": ":"})])
    return _finish(fig, "diagnostics", "Per-agent training diagnostics",
                   "Per-step diagnostics of each role (solid = planner, dashed = sub-agent; dotted "
                   "= the second quantity named in the panel title), EMA-smoothed per run "
                   f"(α = {smooth_text(alpha, auto)}) then averaged over seeds.")


def sub_calls_hist(an: Analysis, arms: list[str]) -> FigureInfo:
    hs = an.sub_calls
    col = colors(arms)
    fig, axes = _grid(1, 1, w=6.5, h=3.4)
    ax = axes[0, 0]
    xlabel, ylabel = "sub-agent calls per rollout (count)", "rollouts (fraction)"
    if not hs:
        _no_data(ax, xlabel, ylabel, "sub-agent calls per rollout", "no delegation recorded")
    else:
        width = 0.8 / len(hs)
        for i, h in enumerate(hs):
            frac = h.counts / max(h.counts.sum(), 1)
            x = np.arange(frac.size) + (i - (len(hs) - 1) / 2) * width
            ax.bar(x, frac, width=width, color=col.get(h.arm, "0.5"), alpha=0.85,
                   label=f"{h.arm} ({h.source.split()[0]}, n={h.n_rollouts}), q99 = {h.q99}")
            if h.q99 is not None:
                ax.axvline(h.q99, color=col.get(h.arm, "0.5"), ls="--", lw=1.2)
        _labels(ax, "sub-agent calls per rollout (dashed: 0.99 quantile)", xlabel, ylabel)
    _fig_legend(fig, axes, [("dashed: 0.99 quantile", {"color": "0.3", "ls": "--"})] if hs else None)
    return _finish(fig, "sub_calls_hist", "Sub-agent calls per rollout (d_k)",
                   "Distribution of the number of sub-agent calls per planner rollout, per trainer; "
                   "dashed lines mark the 0.99 quantile, the paper's rule for the alignment target "
                   "d (docs/paper.md). Source: training step records (sub_calls_hist), else eval task records.")


def all_figures(ds: Dataset, an: Analysis, alpha: float, auto: bool = False) -> list[FigureInfo]:
    return [accuracy_curves(ds, an, alpha, auto), reward_curves(ds, alpha, auto), sample_efficiency(ds, an),
            diagnostics(ds, alpha, auto), sub_calls_hist(an, ds.arms())]
