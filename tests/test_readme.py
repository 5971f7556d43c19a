"""The README as a new user follows it (issue 14): its commands, copied into a fresh shell, work.

In a fresh ``git clone`` of this working tree (tracked files as they are now, uncommitted changes
included, untracked-but-not-ignored files too; this checkout's ``.venv`` is reused through a link,
so nothing is installed twice), the test runs ``make demo QUICK=1`` and then every command of the
README's "Commands" block, in order, each through ``bash -c 'source .venv/bin/activate && <command>'``
with a clean environment (no ``HF_*`` offline flags, no pytest variables, the virtualenv not on
``PATH``): what a person gets who opens a new terminal.

"Small settings": a command that trains or evaluates gets the overrides in :data:`SMALL` appended
(the quick warm start and training settings of ``harness experiment --quick``, one task per
benchmark), and names the quick demo's folders (``experiment-tiny-quick``) where the README names
the full demo's. Nothing else is changed. Each command must exit 0 and its output must match what
the README says it prints (:data:`EXPECT`). A README command this test does not know, or a known one
the README lost, fails the test: the README and the test change together.

``make test`` is what runs this test, so it is not called inside it; ``make demo`` without
``QUICK=1`` is the full 25-minute run, which ``python -m harness experiment --preset tiny --seeds 2``
stands for here with ``--quick``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from harness.experiment import QUICK_TRAIN, QUICK_WARMSTART

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: What the demo's quick run names instead of the full demo's folders.
QUICK_PATHS = {"runs/experiment-tiny-spans/": "runs/experiment-tiny-spans-quick/"}
#: Small settings appended to each README command (keyed by the command as the README writes it,
#: comment removed). ``None``: the command is covered by ``make demo QUICK=1`` (checked in the test).
SMALL: dict[str, list[str] | None] = {
    "source .venv/bin/activate": [],
    "python -m harness --help": [],
    "python -m harness world serve --seed 0 --size tiny": [],
    "python -m harness world tasks --seed 0 --size tiny --out tasks/": [],
    "python -m harness warmstart --config baselines/configs/tiny/warmstart.yaml --out runs/warmstart-tiny":
        QUICK_WARMSTART,
    'python -m harness run --question "In which country is Patal?" --world-size tiny --model runs/warmstart-tiny':
        ["--max-new-tokens", "24"],
    "python -m harness train --trainer mgrpo --config baselines/configs/tiny/mgrpo.yaml --seed 0 --run-dir "
    "runs/mgrpo-tiny models.planner=runs/warmstart-tiny models.sub=runs/warmstart-tiny": QUICK_TRAIN,
    "python -m harness train --resume runs/mgrpo-tiny": [],
    "python -m harness filter --config baselines/configs/tiny/mgrpo.yaml --out runs/filter-tiny --k 4 "
    "models.planner=runs/warmstart-tiny models.sub=runs/warmstart-tiny":
        ["tasks.n_train=1", "rollout.planner_turns=2", "rollout.sub_turns=2", "rollout.max_new_tokens=24"],
    "python -m harness experiment --preset tiny-spans --seeds 3 --report reports/tiny-cpu": None,
    "python -m harness experiment --preset tiny-stage1 --seeds 3": ["--quick", "--seeds", "1"],
    "pytest benchmarks/ --trainer=expert --bench local_gaia --bench-limit 5": [],
    "pytest benchmarks/ --trainer=mgrpo": ["--bench-limit", "1"],
    "pytest benchmarks/ --trainer=mgrpo --run runs/experiment-tiny-spans/runs/mgrpo-seed0": ["--bench-limit", "1"],
    "python -m harness.report --runs runs/experiment-tiny-spans/runs --out reports/latest": [],
    "python -m harness profile --preset tiny --trainer mgrpo --out runs/profile":
        ["--steps", "2", *(o for o in QUICK_TRAIN if not o.startswith(("planner.max_steps", "eval.")))],
}
#: Output each command must print (regular expressions, searched in stdout + stderr).
EXPECT: dict[str, list[str]] = {
    "python -m harness --help": [r"commands:", r"\btrain\b", r"\bexperiment\b"],
    "python -m harness world tasks": [r"wrote \d+ files under tasks/"],
    "python -m harness warmstart": [r'"check"'],
    "python -m harness run": [r"shown to the agents as http://world\.local", r"\[assistant\]", r"answer: .* \(turns \d+, sub-agent calls \d+, format ok \w+, end: \w+\)"],
    "python -m harness train --trainer": [r"\[train\] planner step 1/2", r"\[train\] planner step 2/2",
                                          r"\[train\] completed"],
    "python -m harness train --resume": [r"\[train\] completed"],
    "python -m harness filter": [r"\[filter\] 3 candidate tasks, 4 attempts each .* kept at "
                                 r"tasks.hard_filter_max_success=0.25"],
    "pytest benchmarks/ --trainer=expert": [r"local_gaia", r"\b5 passed\b"],
    "pytest benchmarks/ --trainer=mgrpo": [r"local_gaia", r"local_webwalkerqa", r"local_xbench"],
    "python -m harness.report": [r"report"],
    "python -m harness experiment --preset tiny-stage1": [r"\[1/3\] warm start \.\.\.", r"mgrpo x 1 seed\b",
                                                         r"done in [\d.]+ min; report: .*tiny-stage1-cpu-quick"],
    "python -m harness profile": [r"\*\*mgrpo / planner\*\*: [\d.]+ s per step over 1 step, model compute \d+%"],
}


def readme_commands(text: str) -> list[str]:
    """The command lines of the README's "Commands" code block, comments removed."""
    section = text.split("\n## Commands", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README.md: no ```bash block under ## Commands"
    lines = [re.sub(r"\s{2,}#.*$", "", ln).strip() for ln in block.group(1).splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def fresh_clone(dest: Path) -> Path:
    """``git clone`` of this checkout with its uncommitted changes laid over, and its ``.venv`` linked."""
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(dest)], check=True)
    listed = subprocess.run(["git", "ls-files", "-z", "--modified", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    deleted = set(subprocess.run(["git", "ls-files", "-z", "--deleted"], cwd=ROOT, capture_output=True,
                                 check=True).stdout.decode().split("\0"))
    for rel in filter(None, listed):
        target = dest / rel
        if rel in deleted:
            target.unlink(missing_ok=True)
        elif (ROOT / rel).is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, target)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    # make's install stamp must stay newer than the clone's pyproject.toml, or `make demo` reinstalls into
    # the shared virtualenv (with the clone as the editable source)
    stamp = ROOT / ".venv" / ".installed"
    if stamp.is_file():
        before = stamp.stat().st_mtime - 60
        os.utime(dest / "pyproject.toml", (before, before))
    return dest


def user_env() -> dict[str, str]:
    """The environment of a new terminal: no offline flags, no pytest or virtualenv variables."""
    venv_bin = str(ROOT / ".venv" / "bin")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST", "XDIST", "HF_", "VIRTUAL_ENV", "TRANSFORMERS", "COV_"))
           and k not in ("PYTHONPATH", "OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return env


def shell(clone: Path, command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", f"source .venv/bin/activate && {command}"], cwd=clone, env=user_env(),
                          capture_output=True, text=True, timeout=timeout)


def small(command: str) -> str:
    extra = SMALL[command] or []
    for full, quick in QUICK_PATHS.items():
        command = command.replace(full, quick)
    return " ".join([command, *(f"'{a}'" if " " in a or "[" in a else a for a in extra)])


def expectations(command: str) -> list[str]:
    return [p for prefix, pats in EXPECT.items() if command.startswith(prefix) for p in pats]


def serve_and_fetch(clone: Path, command: str) -> str:
    """``world serve``: start it, read the address it prints, fetch the front page, stop it with Ctrl-C."""
    proc = subprocess.Popen(["bash", "-c", f"source .venv/bin/activate && exec {command}"], cwd=clone,
                            env=user_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = ""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline() if proc.stdout else ""
            m = re.search(r"Serving the offline world \(seed 0, size tiny, \d+ pages\) at (http://127\.0\.0\.1:\d+)/", line)
            if m:
                with urllib.request.urlopen(m.group(1) + "/", timeout=30) as resp:
                    assert resp.status == 200 and "<html" in resp.read().decode().lower()
                break
            if not line and proc.poll() is not None:
                break
        else:
            pytest.fail(f"world serve printed no address within 120 s (last line {line!r})")
        assert m, f"world serve exited without the README's address line: {line!r}"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        return line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_readme_commands_work_when_copied_into_a_fresh_shell(tmp_path):
    text = README.read_text()
    commands = readme_commands(text)
    unknown = [c for c in commands if c not in SMALL]
    assert not unknown, f"README commands this test does not know (add them to SMALL and EXPECT): {unknown}"
    lost = [c for c in SMALL if c not in commands]
    assert not lost, f"commands this test runs that the README no longer has: {lost}"
    assert commands[0] == "source .venv/bin/activate", "the README activates the virtualenv once, first"
    # The make target runs what the README says it runs.
    makefile = (ROOT / "Makefile").read_text()
    assert "DEMO_PRESET ?= tiny-spans" in makefile and "harness experiment --preset $(DEMO_PRESET)" in makefile
    assert "--seeds 3" in makefile and "--report reports/tiny-cpu" in makefile
    # The example question is one of the world's own tasks, and the README names its answer.
    clone = fresh_clone(tmp_path / "clone")

    demo = subprocess.run(["make", "demo", "QUICK=1"], cwd=clone, env=user_env(), capture_output=True, text=True,
                          timeout=1500)
    out = demo.stdout + demo.stderr
    assert demo.returncode == 0, f"make demo QUICK=1 failed ({demo.returncode}):\n{out[-4000:]}"
    exp = clone / "runs" / "experiment-tiny-spans-quick"
    for arm in ("single_agent", "frozen_sub", "mgrpo", "mgrpo_align_none"):
        status = json.loads((exp / "runs" / f"{arm}-seed0" / "status.json").read_text())
        assert status["state"] == "completed", (arm, status)
        # every run starts from the shipped warm start, which the demo does not rebuild
        models = yaml.safe_load((exp / "runs" / f"{arm}-seed0" / "config.yaml").read_text())["models"]
        assert models["planner"] == models["sub"] == "baselines/checkpoints/tiny-spans", (arm, models)
    assert "warm start: the shipped checkpoint baselines/checkpoints/tiny-spans" in out
    assert not (exp / "warmstart").exists()
    mgrpo_run = exp / "runs" / "mgrpo-seed0"
    assert [json.loads(ln)["step"] for ln in (mgrpo_run / "planner" / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert list((mgrpo_run / "eval").iterdir())  # periodic evaluation wrote task records
    report_md = (clone / "reports" / "tiny-cpu-quick" / "report.md").read_text()
    head = report_md.splitlines()[0]
    assert "tiny-scale CPU run" in head and "claims no learning" in head
    assert "## The paper's claims" in report_md and (clone / "reports" / "tiny-cpu-quick" / "report.html").is_file()
    assert "claims no learning" in out, "the console summary of verdicts carries the report's caveat"

    timings = {}
    for command in commands[1:]:
        if SMALL[command] is None:
            continue  # the experiment: what make demo QUICK=1 just ran
        t0 = time.perf_counter()
        if " world serve " in command:
            serve_and_fetch(clone, small(command))
            timings[command] = time.perf_counter() - t0
            continue
        proc = shell(clone, small(command), timeout=900)
        timings[command] = time.perf_counter() - t0
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"README command failed ({proc.returncode}): {small(command)}\n{output[-4000:]}"
        for pattern in expectations(command):
            assert re.search(pattern, output), f"{small(command)}: output lacks {pattern!r}:\n{output[-3000:]}"
        if " world tasks " in command:
            # the README's example question is a task of the world it names, with the answer it states
            question = re.search(r'--question "([^"]+)"', text).group(1)
            rows = [json.loads(ln) for ln in (clone / "tasks" / "gaia" / "train.jsonl").read_text().splitlines()]
            rows += [json.loads(ln) for ln in (clone / "tasks" / "gaia" / "test.jsonl").read_text().splitlines()]
            match = [r for r in rows if r.get("Question") == question]
            assert match, f"the README's question {question!r} is not a task of world seed 0, size tiny"
            assert f"answer is on its encyclopedia page: {match[0]['Final answer']})" in text
    run = clone / "runs" / "mgrpo-tiny"
    steps = [json.loads(ln)["step"] for ln in (run / "planner" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2], f"train then --resume of the completed run: planner steps {steps}"
    assert (clone / "reports" / "latest" / "report.md").is_file()
    print("README command timings (s): " + json.dumps({c[:60]: round(s, 1) for c, s in timings.items()}, indent=1))
