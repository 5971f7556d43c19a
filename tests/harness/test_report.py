"""Tests of the comparison report (docs/report.md): numbers against hand computations over generated
records, verdicts, collapse rule, robustness to real-world run folders, figures' labels, CLI."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.report import Options, build_report, console_summary, main
from harness.report import analysis, dataset, stats
from tests.support.records_factory import final_accuracy, make_experiment, task_transcript

ROOT = Path(__file__).resolve().parents[2]
BENCHES = ("local_gaia", "local_webwalkerqa")


@pytest.fixture(scope="module")
def messy(tmp_path_factory):
    """3 trainers x 3 seeds with: a failed mgrpo run (short), a missing single_agent seed, a
    truncated last line, a collapsing frozen_sub run; then the report built once."""
    root = tmp_path_factory.mktemp("messy")
    exp = make_experiment(
        root / "runs", steps=60, eval_every=20, benchmarks=BENCHES, n_tasks=30, seed=7,
        overrides={("mgrpo", 2): {"state": "failed", "steps": 40},
                   ("frozen_sub", 0): {"truncated_tail": True},
                   ("frozen_sub", 1): {"collapse_at": 25}},
        missing=(("single_agent", 2),))
    res = build_report(Options(runs_dir=root / "runs", out_dir=root / "out", n_boot=1000))
    return exp, res


def test_accuracy_table_equals_hand_computation(messy):
    exp, res = messy
    cells = {(c.benchmark, c.arm): c for c in res.analysis.accuracy}
    assert set(cells) == {(b, a) for b in BENCHES for a in ("single_agent", "frozen_sub", "mgrpo")}
    for (bench, arm), cell in cells.items():
        runs = [s for s in exp.specs if s.label == arm and s.state != "failed"]
        vals = [final_accuracy(exp, s.run_id, bench) for s in sorted(runs, key=lambda s: s.seed)]
        assert cell.values == pytest.approx(vals)
        assert cell.mean == pytest.approx(statistics.fmean(vals))
        assert cell.std == pytest.approx(statistics.stdev(vals))
        assert cell.n_seeds == len(vals) and cell.seeds == sorted(s.seed for s in runs)
        assert cell.n_tasks == (30, 30)
        assert cell.n_failed == (1 if arm == "mgrpo" else 0)
        assert cell.final_steps == (60, 60)
        assert cell.ci_low <= cell.mean <= cell.ci_high
    # the markdown shows the same numbers
    md = res.markdown.read_text()
    c = cells[("local_gaia", "frozen_sub")]
    assert f"| local_gaia | frozen_sub | {c.mean:.3f} ± {c.std:.3f} | [{c.ci_low:.3f}, {c.ci_high:.3f}] | 30 | 1 | 3 (0, 1, 2) | 60 | 0 |" in md
    assert "| local_gaia | single_agent |" in md and "| 2 (0, 1) |" in md  # the missing seed


def test_bootstrap_is_seeded_and_follows_the_two_level_rule():
    a = [np.array([1, 0, 1, 1]), np.array([0, 0, 1, 0]), np.array([1, 1, 1, 0])]
    d1 = stats.bootstrap_seed_task(a, stats.cell_rng(0, "acc", "b", "x"), 500)
    d2 = stats.bootstrap_seed_task(a, stats.cell_rng(0, "acc", "b", "x"), 500)
    d3 = stats.bootstrap_seed_task(a, stats.cell_rng(1, "acc", "b", "x"), 500)
    assert np.array_equal(d1, d2) and not np.array_equal(d1, d3)
    # hand computation of the same draws
    rng = stats.cell_rng(0, "acc", "b", "x")
    inner = np.stack([x[rng.integers(0, 4, size=(500, 4))].mean(1) for x in a])
    pick = rng.integers(0, 3, size=(500, 3))
    assert np.allclose(d1, inner[pick, np.arange(500)[:, None]].mean(1))
    # degenerate: everything correct -> a point interval at 1
    ones = stats.bootstrap_seed_task([np.ones(5), np.ones(7)], stats.cell_rng(0), 300)
    assert stats.percentile_ci(ones) == (1.0, 1.0)
    # more tasks -> a narrower interval
    rng = np.random.default_rng(0)
    small = [rng.random(20) < 0.5 for _ in range(3)]
    big = [rng.random(2000) < 0.5 for _ in range(3)]
    w = [np.subtract(*stats.percentile_ci(stats.bootstrap_seed_task(x, stats.cell_rng(0), 1000))[::-1])
         for x in (small, big)]
    assert w[1] < w[0]


@pytest.mark.parametrize("diff,lo,hi,expected", [
    (0.1, 0.02, 0.2, stats.SUPPORTED), (0.1, -0.01, 0.2, stats.INCONCLUSIVE),
    (0.0, -0.1, 0.1, stats.NOT_SUPPORTED), (-0.2, -0.3, -0.1, stats.NOT_SUPPORTED),
    (math.nan, math.nan, math.nan, stats.NOT_RUN)])
def test_verdict_rule(diff, lo, hi, expected):
    assert stats.verdict(diff, lo, hi) == expected


def test_combine_verdicts_precedence():
    S, N, I, R = stats.SUPPORTED, stats.NOT_SUPPORTED, stats.INCONCLUSIVE, stats.NOT_RUN
    assert stats.combine_verdicts([S, S]) == S
    assert stats.combine_verdicts([S, I]) == I
    assert stats.combine_verdicts([I, R]) == R
    assert stats.combine_verdicts([R, N]) == N


def _analyse(root: Path) -> analysis.Analysis:
    return analysis.analyse(dataset.load(root), smooth=0.05, collapse_margin=0.1, n_boot=1000)


def test_claims_supported_and_not_run(tmp_path: Path):
    make_experiment(tmp_path, trainers=("frozen_sub", "mgrpo"), steps=40, eval_every=20,
                    benchmarks=BENCHES, n_tasks=200, final_acc={"frozen_sub": 0.3, "mgrpo": 0.8})
    an = _analyse(tmp_path)
    claims = {c.key: c for c in an.claims}
    fig6 = claims["fig6"]
    assert fig6.verdict == stats.SUPPORTED
    pooled = fig6.comparisons[0]
    assert pooled.scope.startswith("pooled") and pooled.diff > 0.3 and pooled.ci_low > 0
    acc = {(c.benchmark, c.arm): c.mean for c in an.accuracy}
    assert pooled.diff == pytest.approx(np.mean([acc[(b, "mgrpo")] - acc[(b, "frozen_sub")]
                                                 for b in BENCHES]))
    assert pooled.steps_above[1] == 3  # eval steps 0, 20, 40
    assert claims["fig7"].verdict == stats.NOT_RUN  # no single_agent runs
    assert "single_agent" in claims["fig7"].comparisons[-1].scope
    assert claims["fig8"].verdict == stats.NOT_RUN
    # 3 seeds of 40 steps, sub-agents trained: nothing qualifies the verdicts
    assert an.caveats == [] and all(c.caveats == [] for c in an.claims)


def test_claims_never_pool_real_and_local_benchmarks(tmp_path: Path):
    """A real benchmark (GAIA on the web) and the offline twins are pooled separately: the real family is the
    headline, the local one follows, and no comparison mixes them (docs/report.md)."""
    make_experiment(tmp_path, trainers=("frozen_sub", "mgrpo"), steps=40, eval_every=20,
                    benchmarks=("gaia", "webwalkerqa", "local_gaia"), n_tasks=100,
                    final_acc={"frozen_sub": 0.3, "mgrpo": 0.8})
    an = _analyse(tmp_path)
    fig6 = {c.key: c for c in an.claims}["fig6"]
    scopes = [c.scope for c in fig6.comparisons]
    assert scopes == ["pooled (gaia, webwalkerqa)", "pooled (local_gaia)", "gaia", "local_gaia", "webwalkerqa"]
    acc = {(c.benchmark, c.arm): c.mean for c in an.accuracy}
    real = fig6.comparisons[0]
    assert real.diff == pytest.approx(np.mean([acc[(b, "mgrpo")] - acc[(b, "frozen_sub")]
                                               for b in ("gaia", "webwalkerqa")]))
    assert analysis.families(["local_xbench", "gaia", "local_gaia", "xbench_deepsearch"]) == [
        ["gaia", "xbench_deepsearch"], ["local_xbench", "local_gaia"]]


def test_claims_not_supported_when_ordering_is_reversed(tmp_path: Path):
    make_experiment(tmp_path, steps=40, eval_every=20, benchmarks=BENCHES, n_tasks=100,
                    with_align_none=True,
                    final_acc={"single_agent": 0.5, "frozen_sub": 0.7, "mgrpo": 0.3,
                               "mgrpo[alignment=none]": 0.6})
    claims = {c.key: c for c in _analyse(tmp_path).claims}
    assert claims["fig6"].verdict == stats.NOT_SUPPORTED
    assert claims["fig6"].comparisons[0].diff < 0
    assert claims["fig7"].verdict == stats.NOT_SUPPORTED  # one pair contradicts
    assert claims["fig8"].verdict == stats.NOT_SUPPORTED  # the ablation arm was found by config


def test_claims_fall_back_to_training_reward_without_eval(tmp_path: Path):
    make_experiment(tmp_path, trainers=("frozen_sub", "mgrpo"), steps=40, eval_every=20,
                    benchmarks=BENCHES, n_tasks=5, final_acc={"frozen_sub": 0.2, "mgrpo": 0.9})
    for d in tmp_path.glob("*/eval"):
        shutil.rmtree(d)
    fig6 = _analyse(tmp_path).claims[0]
    (c,) = fig6.comparisons
    assert "training reward" in c.metric and fig6.verdict == stats.SUPPORTED


def test_collapse_rule_unit():
    steps = np.arange(0, 100, 10)
    rise = [0.1, 0.3, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
    assert stats.detect_collapse(steps, rise, 0.1, 1.0) is None
    dip = [0.1, 0.3, 0.6, 0.6, 0.2, 0.2, 0.6, 0.6, 0.6, 0.6]  # recovers
    assert stats.detect_collapse(steps, dip, 0.1, 1.0) is None
    last_only = [0.1, 0.3, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.2]  # one bad final point
    assert stats.detect_collapse(steps, last_only, 0.1, 1.0) is None
    fall = [0.1, 0.3, 0.6, 0.6, 0.2, 0.6, 0.3, 0.2, 0.2, 0.1]
    c = stats.detect_collapse(steps, fall, 0.1, 1.0)
    assert c is not None and c.peak_step == 20 and c.collapse_step == 60
    assert c.drop == pytest.approx(0.5)
    with pytest.raises(ValueError):
        stats.detect_collapse(steps, fall, 0.0, 1.0)


def test_step_aware_ema():
    assert np.allclose(stats.ema([0, 1, 1], 1.0), [0, 1, 1])
    assert np.allclose(stats.ema([0.0, 1.0], 0.5), [0.0, 0.5])
    # a point 2 steps later weighs 1 - 0.5**2
    assert np.allclose(stats.ema([0.0, 1.0], 0.5, [0, 2]), [0.0, 0.75])
    assert np.allclose(stats.ema([0.0, np.nan, 1.0], 0.5, [0, 1, 2]), [0.0, 0.0, 0.75])
    with pytest.raises(ValueError):
        stats.ema([1.0], 0.0)


def test_collapse_found_in_report_and_clean_runs_pass(messy):
    _, res = messy
    rows = res.analysis.collapses
    assert rows, "the collapsing frozen_sub-s1 run must be detected"
    assert {r.run_id for r in rows} == {"frozen_sub-s1"}
    reward = [r for r in rows if r.series == "training reward (planner)"]
    assert reward and 25 <= reward[0].collapse_step <= 45
    assert reward[0].drop > 0.1
    assert "frozen_sub-s1" in res.markdown.read_text().split("## Collapse detection")[1]


def test_crashed_short_missing_and_truncated_runs_are_shown(messy):
    exp, res = messy
    ds = res.dataset
    failed = ds.run("mgrpo-s2")
    assert failed.state == "failed" and failed.short and failed.last_step["planner"] == 40
    assert any("CUDA out of memory" in n for n in failed.notes)
    assert (ds.steps["run_id"] == "mgrpo-s2").sum() == 80  # its curves are kept (2 roles x 40)
    assert "single_agent-s2" not in {r.run_id for r in ds.runs}
    trunc = ds.run("frozen_sub-s0")
    assert any("incomplete last line skipped" in n for n in trunc.notes)
    assert trunc.last_step["planner"] == 60  # the torn copy of line 60 was skipped
    md = res.markdown.read_text()
    prov = md.split("## Runs and provenance")[1]
    assert re.search(r"\| mgrpo-s2 \| mgrpo \| 2 \| failed \|", prov)
    assert "incomplete last line skipped" in prov
    page = res.html.read_text()
    assert 'class="s-failed">failed</td>' in page
    assert len(re.findall(r"<details><summary>provenance of ", page)) == len(ds.runs)


def test_sub_calls_hist_and_quantile_match_records(messy):
    exp, res = messy
    hists = {h.arm: h for h in res.analysis.sub_calls}
    assert set(hists) == {"frozen_sub", "mgrpo"}  # single_agent never delegates
    counts = np.zeros(13)
    for s in exp.specs:
        if s.label != "mgrpo":
            continue
        for line in (exp.root / s.run_id / "planner" / "metrics.jsonl").read_text().splitlines():
            counts += np.asarray(json.loads(line)["sub_calls_hist"])
    assert np.array_equal(hists["mgrpo"].counts, counts)
    cdf = np.cumsum(counts) / counts.sum()
    assert hists["mgrpo"].q99 == int(np.argmax(cdf >= 0.99))
    assert hists["mgrpo"].source == "training step records"


def test_diagnostics_show_each_roles_peak_memory_from_its_records(messy):
    """The peak-memory column is the mean over runs of each run's last 10% of steps (docs/report.md)."""
    exp, res = messy
    row = next(d for d in res.analysis.diagnostics if d.arm == "single_agent" and d.role == "planner")
    per_run = []
    for s in exp.specs:
        if s.label != "single_agent":
            continue
        lines = (exp.root / s.run_id / "planner" / "metrics.jsonl").read_text().splitlines()
        peaks = [json.loads(x)["peak_rss_mib"] for x in lines]
        k = max(1, math.ceil(analysis.FINAL_WINDOW * len(peaks)))
        per_run.append(statistics.mean(peaks[-k:]))
    assert per_run and row.values["peak_rss_mib"] == pytest.approx(statistics.mean(per_run))
    assert math.isnan(row.values["peak_gpu_mib"])  # no GPU recorded: n/a, not 0
    md = res.markdown.read_text()
    assert "peak memory (MiB; GPU)" in md and f"{row.values['peak_rss_mib']:,.0f}" in md


def test_figures_have_axis_labels_units_legends(messy):
    _, res = messy
    figs = {f.name: f for f in res.figures}
    assert set(figs) == {"accuracy_curves", "reward_curves", "sample_efficiency", "diagnostics",
                         "sub_calls_hist"}
    for f in figs.values():
        assert f.png.startswith(b"\x89PNG") and f.panels
        assert f.legend, f"{f.name} has no legend"
        for p in f.panels:
            assert p.title and p.xlabel and p.ylabel, (f.name, p)
            assert re.search(r"\(.+\)", p.xlabel) and re.search(r"\(.+\)", p.ylabel), (f.name, p)
            assert p.has_data, (f.name, p.title)
    acc = figs["accuracy_curves"]
    assert [p.title for p in acc.panels] == list(BENCHES)  # a panel per benchmark
    assert all(p.ylabel == "accuracy (fraction correct)" for p in acc.panels)
    for arm in ("single_agent", "frozen_sub", "mgrpo"):
        assert any(lab.startswith(arm + " (n=") for lab in acc.legend)
    assert any("EMA" in lab for lab in acc.legend) and any("raw" in lab for lab in acc.legend)
    assert [p.title for p in figs["reward_curves"].panels] == ["planner training reward",
                                                               "sub training reward"]
    assert {p.xlabel for p in figs["sample_efficiency"].panels} == {
        "planner trajectories seen (count)", "model tokens seen (count, all roles)"}
    hist = figs["sub_calls_hist"]
    assert any("q99 = " in lab for lab in hist.legend)
    for f in res.figure_paths:
        assert f.read_bytes().startswith(b"\x89PNG")


def test_reward_figure_draws_the_format_share_from_the_records(messy):
    """Issue 16 (paper Fig. 5 analogue): the training-reward figure shows, dotted, each step's share of well-formed
    trajectories, read from the records' ``reward_components.format``; the reward rises with it while the format is
    learned."""
    exp, res = messy
    st = res.dataset.steps
    some = next(s for s in exp.specs if s.state != "failed" and s.label == "mgrpo")
    lines = [json.loads(x) for x in (exp.root / some.run_id / "sub" / "metrics.jsonl").read_text().splitlines()]
    got = st[(st["run_id"] == some.run_id) & (st["role"] == "sub")].sort_values("step")[dataset.FORMAT_COLUMN]
    assert got.tolist() == pytest.approx([ln["reward_components"]["format"] for ln in lines])
    fig = next(f for f in res.figures if f.name == "reward_curves")
    assert any("well-formed" in lab for lab in fig.legend)
    assert "share of well-formed trajectories" in fig.caption


def test_outputs_are_self_contained_and_consistent(messy):
    _, res = messy
    page = res.html.read_text()
    imgs = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(imgs) == len(res.figures)
    assert all(src.startswith("data:image/png;base64,") for src in imgs)
    assert not re.search(r'(src|href)="(https?:|//|file:)', page)
    assert "<script" not in page
    md = res.markdown.read_text()
    for f in res.figures:
        assert f"](figures/{f.filename})" in md
    js = json.loads(res.json.read_text())
    assert [c["verdict"] for c in js["claims"]] == [c.verdict for c in res.analysis.claims]
    assert {r["run_id"] for r in js["runs"]} == {r.run_id for r in res.dataset.runs}


def test_mixed_schema_versions_are_migrated(tmp_path: Path):
    make_experiment(tmp_path, trainers=("mgrpo",), seeds=(0,), steps=10, eval_every=5,
                    benchmarks=("b",), n_tasks=4)
    metrics = tmp_path / "mgrpo-s0" / "planner" / "metrics.jsonl"
    lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    for d in lines[:5]:  # the first half written by an older harness
        d.pop("schema")
        d["reward"] = d.pop("reward_mean")
    metrics.write_text("".join(json.dumps(d) + "\n" for d in lines))
    ds = dataset.load(tmp_path)
    run = ds.run("mgrpo-s0")
    assert run.schemas == {0, 1} and run.migrated == 5
    assert any("migrated from schema [0]" in n for n in run.notes)
    planner = ds.steps[(ds.steps["role"] == "planner")]
    assert planner["reward_mean"].notna().all() and len(planner) == 10


def _run_main(args: list[str], capsys) -> tuple[int, str]:
    code = main(args)
    cap = capsys.readouterr()
    return code, cap.out + cap.err


def test_newer_schema_refused_with_message(tmp_path: Path, capsys):
    make_experiment(tmp_path / "runs", trainers=("mgrpo",), seeds=(0,), steps=4, eval_every=2,
                    benchmarks=("b",), n_tasks=3)
    f = tmp_path / "runs" / "mgrpo-s0" / "eval" / "2" / "b.jsonl"
    lines = f.read_text().splitlines()
    d = json.loads(lines[1])
    d["schema"] = 7
    lines[1] = json.dumps(d)
    f.write_text("\n".join(lines) + "\n")
    code, out = _run_main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "o")], capsys)
    assert code == 1
    assert f"{f}:2: task record has schema version 7, newer than this harness" in out
    assert not (tmp_path / "o" / "report.md").exists()


def test_broken_line_stops_with_file_and_line(tmp_path: Path, capsys):
    make_experiment(tmp_path / "runs", trainers=("mgrpo",), seeds=(0,), steps=4, eval_every=2,
                    benchmarks=("b",), n_tasks=3)
    f = tmp_path / "runs" / "mgrpo-s0" / "sub" / "metrics.jsonl"
    lines = f.read_text().splitlines()
    lines[1] = lines[1][:20]
    f.write_text("\n".join(lines) + "\n")
    code, out = _run_main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "o")], capsys)
    assert code == 1 and f"{f}:2: broken JSONL line" in out


@pytest.mark.parametrize("setup,expect", [
    ("missing", "does not exist"), ("empty", "no runs found"), ("junk", "no runs found")])
def test_missing_or_empty_runs_folder(tmp_path: Path, capsys, setup, expect):
    runs = tmp_path / "runs"
    if setup != "missing":
        runs.mkdir()
    if setup == "junk":
        (runs / "notes").mkdir()
        (runs / "notes" / "readme.txt").write_text("x")
    code, out = _run_main(["--runs", str(runs), "--out", str(tmp_path / "o")], capsys)
    assert code == 1 and expect in out and str(runs) in out
    if setup == "junk":  # the folder it skipped is named, with why
        assert "skipped notes/: not a run: no provenance.json" in out


def test_about_text_is_shown_under_the_title_and_kept_in_the_json(tmp_path: Path, capsys):
    """``--about FILE`` (what a probe preset's setting is, e.g. its planted blind spots): paragraphs and '- ' bullets
    under "About this setting", before the claims, in the Markdown and the HTML; the text in report.json; a file
    that cannot be read is a usage error naming it."""
    make_experiment(tmp_path / "runs", trainers=("mgrpo",), seeds=(0,), steps=4, eval_every=2,
                    benchmarks=("b",), n_tasks=3)
    about = tmp_path / "ABOUT.md"
    about.write_text("Blind spots are planted\non purpose.\n\n- planner: wrong relation\n  7 times in 10\n"
                     "- sub-agent: wrong row\n", encoding="utf-8")
    code, _ = _run_main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "o"), "--about", str(about)], capsys)
    assert code == 0
    md = (tmp_path / "o" / "report.md").read_text()
    assert md.index("# About this setting") < md.index("# The paper's claims")
    assert "Blind spots are planted on purpose." in md
    assert "- planner: wrong relation 7 times in 10\n- sub-agent: wrong row" in md
    assert "<li>planner: wrong relation 7 times in 10</li>" in (tmp_path / "o" / "report.html").read_text()
    assert json.loads((tmp_path / "o" / "report.json").read_text())["about"] == about.read_text()
    code, _ = _run_main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "o2")], capsys)
    assert "About this setting" not in (tmp_path / "o2" / "report.md").read_text()
    assert json.loads((tmp_path / "o2" / "report.json").read_text())["about"] is None
    with pytest.raises(SystemExit) as ei:
        main(["--runs", str(tmp_path / "runs"), "--about", str(tmp_path / "missing.md")])
    assert ei.value.code == 2 and f"--about {tmp_path / 'missing.md'}: cannot read it" in capsys.readouterr().err


def test_bad_options_exit_2(tmp_path: Path, capsys):
    for args in (["--smooth", "0"], ["--smooth", "1.5"], ["--collapse-margin", "-1"],
                 ["--bootstrap", "5"]):
        with pytest.raises(SystemExit) as ei:
            main(["--runs", str(tmp_path), *args])
        assert ei.value.code == 2
    err = capsys.readouterr().err
    assert "--smooth must be in (0, 1], got 0.0" in err and "--bootstrap must be >= 100" in err


def test_cli_entry_points_default_paths_and_no_torch(tmp_path: Path, capsys):
    make_experiment(tmp_path / "runs", trainers=("frozen_sub", "mgrpo"), seeds=(0, 1), steps=6,
                    eval_every=3, benchmarks=("b",), n_tasks=5)
    # `python -m harness.report` with no arguments, from the folder that holds runs/: the module
    # runs as __main__ (runpy, as -m does) and must not import torch.
    code = ("import runpy, sys\n"
            "sys.argv = ['python -m harness.report']\n"
            "try:\n    runpy.run_module('harness.report', run_name='__main__')\n"
            "except SystemExit as e:\n    rc = e.code\n"
            "assert 'torch' not in sys.modules, 'the report imported torch'\n"
            "sys.exit(rc)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Fig. 6" in out.stdout
    for name in ("report.md", "report.html", "report.json", "figures/accuracy_curves.png"):
        assert (tmp_path / "reports" / "latest" / name).is_file()
    # `python -m harness report ...` dispatches to the same main
    from harness.__main__ import main as harness_main

    rc = harness_main(["report", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "r2"),
                       "--smooth", "0.3"])
    assert rc == 0, capsys.readouterr().err
    assert (tmp_path / "r2" / "report.html").is_file()
    assert "EMA α = 0.3" in (tmp_path / "r2" / "report.md").read_text()


def test_run_without_provenance_or_status_is_kept(tmp_path: Path):
    make_experiment(tmp_path, trainers=("mgrpo",), seeds=(0, 1), steps=6, eval_every=3,
                    benchmarks=("b",), n_tasks=4,
                    overrides={("mgrpo", 1): {"provenance": False, "state": None}})
    ds = dataset.load(tmp_path)
    r = ds.run("mgrpo-s1")
    assert r.state == "unknown" and r.provenance is None
    assert r.trainer == "mgrpo" and r.seed == 1
    assert any("no provenance.json" in n for n in r.notes)


def test_mgrpo_runs_whose_sub_agent_did_not_train_are_flagged(tmp_path: Path, capsys):
    """Issue 14: an mgrpo run whose planner never delegated leaves no sub records (the sub role
    trained 0 steps); the report shows the sub steps per run, flags it (and one that trained fewer
    than half the planner's steps) not comparable, and every verdict using the arm says so."""
    runs = tmp_path / "runs"
    make_experiment(runs, trainers=("frozen_sub", "mgrpo"), steps=20, eval_every=10, benchmarks=("b",),
                    n_tasks=5)
    (runs / "mgrpo-s0" / "sub" / "metrics.jsonl").unlink()  # as the trainer leaves it: no sub step
    sub1 = runs / "mgrpo-s1" / "sub" / "metrics.jsonl"
    sub1.write_text("".join(sub1.read_text().splitlines(keepends=True)[:9]))  # 9 of 20 steps
    code, out = _run_main(["--runs", str(runs), "--out", str(tmp_path / "o"), "--bootstrap", "100"], capsys)
    assert code == 0, out
    js = json.loads((tmp_path / "o" / "report.json").read_text())
    by_run = {r["run_id"]: r for r in js["runs"]}
    assert [by_run[f"mgrpo-s{i}"]["sub_steps"] for i in range(3)] == [0, 9, 20]
    assert by_run["frozen_sub-s0"]["sub_steps"] is None  # its sub-agent is frozen by design
    assert "trained no step" in by_run["mgrpo-s0"]["not_comparable"]
    assert "9 of the planner's 20 steps" in by_run["mgrpo-s1"]["not_comparable"]
    assert by_run["mgrpo-s2"]["not_comparable"] is None
    assert [c["key"] for c in js["caveats"]] == ["sub_untrained"]  # 3 seeds of 20 steps: nothing else
    claims = {c["key"]: c for c in js["claims"]}
    assert all(claims[k]["caveats"] == ["sub-agent did not train"] for k in ("fig6", "fig7", "fig8"))
    md = (tmp_path / "o" / "report.md").read_text()
    table = md.split("### Did the sub-agent train?")[1].split("##")[0]
    assert "| mgrpo-s0 | mgrpo | 0 | completed | 20 | 0 | no: its sub-agent trained no step" in table
    assert "| mgrpo-s2 | mgrpo | 2 | completed | 20 | 20 | yes |" in table
    assert "frozen_sub-s0" not in table
    assert re.search(r"\| mgrpo-s0 \| mgrpo \| 0 \| completed \| planner: 20, sub: 0 \|", md)
    caveat = js["caveats"][0]["text"]
    assert caveat.startswith("sub-agent did not train in 2 of 3 mgrpo run(s), not comparable")
    assert caveat in md and f"caveat: {caveat}" in out
    for line in (ln for ln in out.splitlines() if ln.lstrip().startswith("Fig. ")):
        assert line.endswith("(caveats: sub-agent did not train)"), line


def test_console_summary_carries_the_report_caveats_and_skipped_folders(tmp_path: Path, capsys):
    """Issue 14: a quick 1-seed report (as `make demo QUICK=1` builds) prints no verdict without the
    caveats its report carries, and the folders it did not read are listed with why."""
    runs = tmp_path / "runs"
    make_experiment(runs, trainers=("frozen_sub", "mgrpo"), seeds=(0,), steps=2, eval_every=1,
                    benchmarks=("b",), n_tasks=4)
    (runs / "notes").mkdir()
    (runs / "notes" / "todo.txt").write_text("x")
    make_experiment(runs / "experiment-x" / "runs", trainers=("mgrpo",), seeds=(0,), steps=2, eval_every=1,
                    benchmarks=("b",), n_tasks=2)
    title = "tiny (1 seeds; --quick smoke run, claims no learning)"
    code, out = _run_main(["--runs", str(runs), "--out", str(tmp_path / "o"), "--bootstrap", "100",
                           "--title", title], capsys)
    assert code == 0, out
    js = json.loads((tmp_path / "o" / "report.json").read_text())
    assert [c["key"] for c in js["caveats"]] == ["quick", "few_seeds"]
    md = (tmp_path / "o" / "report.md").read_text()
    assert md.startswith(f"# {title}\n") and repr(title) in out.splitlines()[0]
    for c in js["caveats"]:
        assert c["text"] in md and f"caveat: {c['text']}" in out
    assert "fewer than 10 planner steps" in js["caveats"][0]["text"]
    assert "frozen_sub 1, mgrpo 1" in js["caveats"][1]["text"]
    verdicts = [ln for ln in out.splitlines() if ln.lstrip().startswith("Fig. ")]
    assert len(verdicts) == 3
    assert all(ln.endswith("(caveats: short runs; fewer than 3 seeds)") for ln in verdicts), verdicts
    assert {s["folder"] for s in js["skipped"]} == {"notes", "experiment-x"}
    assert "skipped notes/: not a run: no provenance.json" in out
    assert "skipped experiment-x/: not a run: no provenance.json" in out
    assert f"it holds runs: pass --runs {runs / 'experiment-x' / 'runs'}" in out
    assert "- notes/: not a run" in md.split("## Runs and provenance")[1]



def test_accuracy_rows_link_to_examples_with_transcripts(tmp_path: Path):
    """Issue 15 item 8: each row of the accuracy table links to its benchmark's examples page, which
    shows per run the first failures and successes at the run's latest evaluated step with their
    transcripts ("no transcript recorded" for records without one)."""
    benches = ("local_gaia", "local_webwalkerqa")
    exp = make_experiment(tmp_path / "runs", trainers=("single_agent", "mgrpo"), seeds=(0, 1), steps=20,
                          eval_every=10, benchmarks=benches, n_tasks=8, seed=5,
                          overrides={("single_agent", 1): {"transcripts": False},
                                     ("mgrpo", 1): {"state": "failed", "steps": 10}})
    # a re-evaluation appended at mgrpo-s0's last step turns its first failure into a success
    from harness import records as rec
    outcome = {f"local_gaia-{t:04d}": ok for t, ok in enumerate(exp.correct[("mgrpo-s0", 20, "local_gaia")])}
    flipped = next(tid for tid, ok in outcome.items() if not ok)
    outcome[flipped] = True
    rec.append_task(tmp_path / "runs" / "mgrpo-s0", rec.TaskRecord(
        run_id="mgrpo-s0", trainer="mgrpo", seed=0, step=20, benchmark="local_gaia", task_id=flipped,
        correct=True, prediction="answer", gold="answer", verdict="correct",
        transcript=task_transcript(flipped, "answer")))
    res = build_report(Options(runs_dir=tmp_path / "runs", out_dir=tmp_path / "out", n_boot=100))

    html_page, md = res.html.read_text(), res.markdown.read_text()
    assert res.example_pages == [tmp_path / "out" / f"examples-{b}.html" for b in benches]
    for c in res.analysis.accuracy:
        link = f"examples-{c.benchmark}.html#arm-{c.arm}"
        assert f'<a href="{link}">failures and successes</a>' in html_page
        assert f"| [failures and successes]({link}) |" in md

    def expected(run_id: str, step: int, bench: str) -> tuple[list[str], list[str]]:
        out = ({f"{bench}-{t:04d}": ok for t, ok in enumerate(exp.correct[(run_id, step, bench)])}
               if (run_id, bench) != ("mgrpo-s0", "local_gaia") else outcome)
        return [t for t, ok in out.items() if not ok][:3], [t for t, ok in out.items() if ok][:3]

    js = json.loads(res.json.read_text())
    shown = {(p["benchmark"], r["run_id"]): r for p in js["examples"] for a in p["arms"] for r in a["runs"]}
    assert set(shown) == {(b, s.run_id) for b in benches for s in exp.specs}  # the failed run too
    for (bench, run_id), r in shown.items():
        step = 10 if run_id == "mgrpo-s1" else 20  # each run's own latest evaluated step
        assert r["step"] == step and (r["failures"], r["successes"]) == expected(run_id, step, bench)
        assert r["with_transcript"] == (0 if run_id == "single_agent-s1" else len(r["failures"]) + len(r["successes"]))
    assert flipped in shown[("local_gaia", "mgrpo-s0")]["successes"]
    assert shown[("local_gaia", "mgrpo-s1")]["state"] == "failed"

    page = (tmp_path / "out" / "examples-local_gaia.html").read_text()
    assert page.count('<details class="example">') == sum(
        len(r["failures"]) + len(r["successes"]) for (b, _), r in shown.items() if b == "local_gaia")
    assert 'id="arm-mgrpo"' in page and 'id="arm-single_agent"' in page and '<a href="report.html">' in page
    assert "<script" not in page and not re.search(r'(src|href)="(https?:|//|file:)', page)
    r0 = shown[("local_gaia", "mgrpo-s0")]
    assert f"run mgrpo-s0 (seed 0, completed): step 20, {sum(outcome.values())} of 8 correct" in page
    fail = r0["failures"][0]
    run_section = page.split("run mgrpo-s0 (seed 0")[1].split("<h3")[0]  # up to the next run's heading
    section = run_section.split(f"<summary>{fail}: incorrect")[1].split("</details>")[0]
    assert f"The results for {fail} point to wrong. &lt;answer&gt;wrong&lt;/answer&gt;" in section  # a sub-agent turn
    assert f"Question {fail}: who founded the lab" in section  # the question, from the transcript
    assert "sub-agent (call 0) · tool · cut when recorded" in section and "observations to 600 characters" in section
    assert "run mgrpo-s1 (seed 1, failed, left out of the table): step 10" in page
    bare = page.split("run single_agent-s1 ")[1].split("<h2")[0]
    assert bare.count("no transcript recorded") == bare.count('<details class="example">') > 0
    assert "no transcript recorded" not in page.split("run single_agent-s1 ")[0]


def test_auto_smoothing_scales_to_the_run_length_and_follows_a_short_runs_data(tmp_path: Path, capsys):
    """Issue 16: a fixed α = 0.05 keeps a 6-step curve at its first value; the default (auto) scales
    the EMA span to the longest run and the captions say so."""
    from harness.report import stats

    assert stats.auto_alpha(6) == pytest.approx(2 / 2.2) and stats.auto_alpha(100) == pytest.approx(2 / 21)
    assert stats.auto_alpha(0) == 1.0 and stats.auto_alpha(10_000) < 0.01
    rising = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    fixed = stats.ema(rising, 0.05)
    auto = stats.ema(rising, stats.auto_alpha(6))
    assert fixed[-1] < 0.3 and auto[-1] > 0.9  # the fixed one stays near the first value
    runs = tmp_path / "runs"
    make_experiment(runs, trainers=("frozen_sub", "mgrpo"), seeds=(0, 1), steps=6, eval_every=3,
                    benchmarks=("b",), n_tasks=5)
    code, out = _run_main(["--runs", str(runs), "--out", str(tmp_path / "o"), "--bootstrap", "100"], capsys)
    assert code == 0, out
    js = json.loads((tmp_path / "o" / "report.json").read_text())
    assert js["options"]["smooth_auto"] is True and js["options"]["smooth"] == pytest.approx(stats.auto_alpha(6))
    md = (tmp_path / "o" / "report.md").read_text()
    assert "scaled to the run length" in md and "--smooth auto" in md


def test_bootstrap_resamples_inference_runs_and_tasks_and_their_noise_widens_the_interval():
    # one seed, 3 inference runs x 4 tasks: hand computation of the same draws
    a = np.array([[1, 0, 1, 1], [0, 0, 1, 1], [1, 0, 0, 1]], dtype=float)
    d = stats.bootstrap_seed_task([a], stats.cell_rng(0, "x"), 400)
    rng = stats.cell_rng(0, "x")
    rows = rng.integers(0, 3, size=(400, 3))
    cols = rng.integers(0, 4, size=(400, 4))
    assert np.allclose(d, np.array([a[np.ix_(r, c)].mean() for r, c in zip(rows, cols)]))
    # one inference run reads as the 1-D per-task outcomes
    one = stats.bootstrap_seed_task([a[:1]], stats.cell_rng(0, "y"), 300)
    assert np.array_equal(one, stats.bootstrap_seed_task([a[0]], stats.cell_rng(0, "y"), 300))
    # the same mean (0.5 of 40 tasks), once with runs that agree and once with a run effect (runs solving
    # 80% and 20%): the decoding noise between runs must widen the interval
    agree = np.zeros((4, 40))
    agree[:, :20] = 1
    run_effect = np.zeros((4, 40))
    run_effect[0::2, :32] = 1
    run_effect[1::2, :8] = 1
    assert agree.mean() == run_effect.mean() == 0.5
    width = [np.subtract(*stats.percentile_ci(stats.bootstrap_seed_task([x], stats.cell_rng(0), 2000))[::-1])
             for x in (agree, run_effect)]
    assert width[1] > 1.5 * width[0] > 0


def test_accuracy_table_averages_inference_runs_and_reports_their_spread(tmp_path: Path):
    from harness.records import TaskRecord, append_task

    # two seeds, 3 inference runs of 4 tasks each: hand-set outcomes
    outcomes = {0: [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]], 1: [[0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1]]}
    for seed, runs in outcomes.items():
        run_dir = tmp_path / "runs" / f"mgrpo-s{seed}"
        for r, row in enumerate(runs):
            for t, ok in enumerate(row):
                append_task(run_dir, TaskRecord(run_id=f"mgrpo-s{seed}", trainer="mgrpo", seed=seed, step=4,
                                                benchmark="local_gaia", task_id=f"t{t}", correct=bool(ok),
                                                inference_run=r, temperature=1.0, sample_seed=100 + r))
    ds = dataset.load(tmp_path / "runs")
    (cell,) = analysis.accuracy_table(ds, n_boot=200)
    per_seed = [np.mean(outcomes[0]), np.mean(outcomes[1])]  # 6/12 and 2/12
    assert cell.values == pytest.approx(per_seed) and cell.mean == pytest.approx(np.mean(per_seed))
    assert cell.n_tasks == (4, 4) and cell.n_inference_runs == (3, 3)
    spread = np.mean([statistics.stdev([np.mean(r) for r in outcomes[s]]) for s in (0, 1)])
    assert cell.run_spread == pytest.approx(spread)
    run_acc = analysis.run_accuracy(ds)
    assert sorted(run_acc["acc"]) == pytest.approx(sorted(per_seed)) and set(run_acc["n_tasks"]) == {4}
    md = build_report(Options(runs_dir=tmp_path / "runs", out_dir=tmp_path / "out", n_boot=100)).markdown.read_text()
    assert f"| 4 | 3 (± {spread:.3f}) | 2 (0, 1) |" in md


def test_in_distribution_accuracy_before_and_after_is_its_own_table_and_never_held_out(tmp_path: Path):
    """Issue 16: with ``eval.train_tasks`` a run also evaluates training questions before training and after its
    last step (``eval_train/<step>/``); the report shows them before -> after per arm, by hand here, and keeps them
    out of the held-out accuracy and the verdicts."""
    from harness.records import TaskRecord, append_task

    # mgrpo, 2 seeds: 4 training questions, 1 inference run; before / after outcomes by hand
    before = {0: [1, 0, 0, 0], 1: [0, 0, 0, 0]}
    after = {0: [1, 1, 1, 0], 1: [1, 0, 0, 0]}
    for seed in (0, 1):
        run_dir = tmp_path / "runs" / f"mgrpo-s{seed}"
        for step, outcome in ((0, before[seed]), (6, after[seed])):
            for t, ok in enumerate(outcome):
                append_task(run_dir, TaskRecord(run_id=f"mgrpo-s{seed}", trainer="mgrpo", seed=seed, step=step,
                                                benchmark="local_gaia", task_id=f"train{t}", correct=bool(ok)),
                            split="train")
            # the held-out evaluation: always 1 of 2
            for t in range(2):
                append_task(run_dir, TaskRecord(run_id=f"mgrpo-s{seed}", trainer="mgrpo", seed=seed, step=step,
                                                benchmark="local_gaia", task_id=f"test{t}", correct=t == 0))
    assert (tmp_path / "runs" / "mgrpo-s0" / "eval_train" / "6" / "local_gaia.jsonl").is_file()
    ds = dataset.load(tmp_path / "runs")
    assert set(ds.evals["task_id"]) == {"test0", "test1"}  # held-out records only
    assert set(ds.indist["task_id"]) == {f"train{t}" for t in range(4)} and set(ds.indist["arm"]) == {"mgrpo"}
    an = analysis.analyse(ds, smooth=0.5, collapse_margin=0.1, n_boot=100)
    (cell,) = an.accuracy
    assert cell.mean == pytest.approx(0.5)  # the training questions never enter the held-out accuracy
    (row,) = an.in_distribution
    assert (row.benchmark, row.arm, row.n_seeds, row.seeds) == ("local_gaia", "mgrpo", 2, [0, 1])
    assert row.before == pytest.approx(np.mean([0.25, 0.0])) and row.after == pytest.approx(np.mean([0.75, 0.25]))
    assert row.diff_mean == pytest.approx(0.375) and row.diff_std == pytest.approx(statistics.stdev([0.5, 0.25]))
    assert row.n_tasks == (4, 4) and row.final_steps == (6, 6)
    res = build_report(Options(runs_dir=tmp_path / "runs", out_dir=tmp_path / "out", n_boot=100))
    md = res.markdown.read_text()
    assert "## In-distribution accuracy (training questions), before and after" in md
    assert "| local_gaia | mgrpo | 0.125 | 0.500 | +0.375 ± 0.177 | 4 | 2 (0, 1) | 6 |" in md
    assert json.loads(res.json.read_text())["in_distribution"][0]["diff_mean"] == pytest.approx(0.375)
    # a run without them: no such section
    shutil.rmtree(tmp_path / "runs" / "mgrpo-s0" / "eval_train")
    shutil.rmtree(tmp_path / "runs" / "mgrpo-s1" / "eval_train")
    md = build_report(Options(runs_dir=tmp_path / "runs", out_dir=tmp_path / "out2", n_boot=100)).markdown.read_text()
    assert "In-distribution accuracy" not in md


def test_unseen_world_accuracy_before_and_after_is_its_own_table_with_the_2sd_bar(tmp_path: Path):
    """Issue 16: ``eval.unseen`` evaluates each run on worlds it never trained on, before (step 0) and after its last
    step (``eval_unseen/<step>/``, ``python -m harness eval-unseen``); the report's own table shows before -> after per
    arm with the seed-to-seed std of "after" and whether the mean gain exceeds twice it, by hand here, and keeps these
    records out of the held-out accuracy of the run's own world."""
    from harness.records import TaskRecord, append_task

    # 3 seeds x 2 inference runs x 5 tasks of another world; "before" the same for every seed, "after" by hand
    before = [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0]]  # 2/10
    after = {0: [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]],  # 7/10
             1: [[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]],  # 7/10
             2: [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0]]}  # 5/10
    for seed in (0, 1, 2):
        run_dir = tmp_path / "runs" / f"mgrpo-s{seed}"
        for step, outcome in ((0, before), (12, after[seed])):
            for r, row in enumerate(outcome):
                for t, ok in enumerate(row):
                    append_task(run_dir, TaskRecord(run_id=f"mgrpo-s{seed}", trainer="mgrpo", seed=seed, step=step,
                                                    benchmark="local_gaia", task_id=f"w1-{t}", correct=bool(ok),
                                                    inference_run=r, temperature=0.7, sample_seed=seed + r),
                                split="unseen")
            append_task(run_dir, TaskRecord(run_id=f"mgrpo-s{seed}", trainer="mgrpo", seed=seed, step=step,
                                            benchmark="local_gaia", task_id="own", correct=False))
    assert (tmp_path / "runs" / "mgrpo-s0" / "eval_unseen" / "12" / "local_gaia.jsonl").is_file()
    ds = dataset.load(tmp_path / "runs")
    assert set(ds.evals["task_id"]) == {"own"} and len(ds.unseen) == 3 * 2 * 2 * 5
    an = analysis.analyse(ds, smooth=0.5, collapse_margin=0.1, n_boot=100)
    (cell,) = an.accuracy
    assert cell.mean == 0.0  # the unseen worlds never enter the run's own held-out accuracy
    (row,) = an.unseen
    assert row.befores == pytest.approx([0.2] * 3) and row.afters == pytest.approx([0.7, 0.7, 0.5])
    assert row.after_std == pytest.approx(statistics.stdev([0.7, 0.7, 0.5]))  # 0.1155
    assert row.diff_mean == pytest.approx(0.4333, abs=1e-4) and row.beyond_2sd is True  # 0.433 > 0.231
    res = build_report(Options(runs_dir=tmp_path / "runs", out_dir=tmp_path / "out", n_boot=100))
    md = res.markdown.read_text()
    assert "## Held-out accuracy on unseen worlds, before and after RL" in md
    assert ("| local_gaia | mgrpo | 0.200 | 0.633 ± 0.115 | +0.433 ± 0.115 | yes | 0: 0.200 -> 0.700; "
            "1: 0.200 -> 0.700; 2: 0.200 -> 0.500 | 5 | 3 (0, 1, 2) | 12 |") in md
    assert json.loads(res.json.read_text())["unseen"][0]["beyond_2sd"] is True
    assert ("unseen worlds, local_gaia mgrpo: 0.200 -> 0.633 (gain +0.433, seed std after 0.115, gain > 2 std: yes; "
            "3 seed(s))") in console_summary(res, "t")
    # a gain within twice the std: "no"
    for t in range(5):
        append_task(tmp_path / "runs" / "mgrpo-s2", TaskRecord(
            run_id="mgrpo-s2", trainer="mgrpo", seed=2, step=12, benchmark="local_gaia", task_id=f"w1-{t}",
            correct=False, inference_run=0, temperature=0.7, sample_seed=2), split="unseen")
    (row,) = analysis.analyse(dataset.load(tmp_path / "runs"), smooth=0.5, collapse_margin=0.1, n_boot=100).unseen
    assert row.afters == pytest.approx([0.7, 0.7, 0.2]) and row.beyond_2sd is False
