"""Preset inheritance (``base:`` in :func:`harness.config.load_yaml`) and the shipped presets' resolved values.

``tests/harness/data/presets_resolved.json`` holds the fully resolved config (every field, defaults
included) of every shipped preset under ``baselines/configs/`` as it was when the presets were full
copies, before they were rewritten as a ``_base.yaml`` plus small differences. The test below loads each
preset through the real loader and asserts equality, so the rewrite changed no value; the fixture stays
committed and guards later edits too: a preset edit, an inheritance slip (a key a preset meant to drop
but inherits) or a changed default of a config dataclass shows up here as a diff naming the preset and
the keys. When such a change is intended, regenerate the fixture and review its diff::

    python -m tests.harness.test_presets --write
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.config import ConfigError, load_config, load_yaml, to_dict

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "baselines" / "configs"
FIXTURE = Path(__file__).resolve().parent / "data" / "presets_resolved.json"


def shipped_presets() -> list[Path]:
    """Every runnable preset: ``<family>/<name>.yaml``; ``_*.yaml`` files are partial bases, not presets."""
    return sorted(p for p in CONFIGS.glob("*/*.yaml") if not p.name.startswith("_"))


def preset_key(path: Path) -> str:
    return path.relative_to(CONFIGS).as_posix()


def resolve(path: Path) -> dict[str, Any]:
    """The fully resolved config of a preset as plain JSON data (what a run saves, tuples as lists)."""
    if path.name == "warmstart.yaml":
        from harness.warmstart import WarmstartConfig

        cfg: Any = load_config(WarmstartConfig, str(path))
    else:
        from harness.train_config import load_train_config

        cfg = load_train_config(str(path))
    return json.loads(json.dumps(to_dict(cfg)))


def _diff(expected: Any, actual: Any, where: str = "") -> list[str]:
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for key in sorted(set(expected) | set(actual)):
            sub = f"{where}.{key}" if where else key
            if key not in actual:
                out.append(f"{sub}: missing (expected {expected[key]!r})")
            elif key not in expected:
                out.append(f"{sub}: unexpected {actual[key]!r}")
            else:
                out += _diff(expected[key], actual[key], sub)
        return out
    return [] if expected == actual else [f"{where}: {actual!r} != expected {expected!r}"]


# ------------------------------------------------------------------ the shipped presets
def test_fixture_covers_every_shipped_preset():
    fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert sorted(fixture) == sorted(preset_key(p) for p in shipped_presets()), (
        "a preset was added or removed: regenerate tests/harness/data/presets_resolved.json "
        "(python -m tests.harness.test_presets --write) and review the diff")


@pytest.mark.parametrize("path", shipped_presets(), ids=preset_key)
def test_preset_resolves_to_the_recorded_config(path):
    expected = json.loads(FIXTURE.read_text(encoding="utf-8"))[preset_key(path)]
    actual = resolve(path)
    assert actual == expected, f"{preset_key(path)} resolves differently:\n" + "\n".join(_diff(expected, actual))


def test_presets_are_a_base_plus_small_differences():
    """Each family has one ``_base.yaml``; a preset names a base and is short (the point of inheritance)."""
    for family in ("tiny", "smollm2", "paper"):
        assert (CONFIGS / family / "_base.yaml").is_file()
    for path in shipped_presets():
        if path.name == "warmstart.yaml":  # a WarmstartConfig, not a training preset
            continue
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert "base" in raw, f"{preset_key(path)} names no base"
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        assert len(lines) <= 25, f"{preset_key(path)}: {len(lines)} lines; move what it shares into a base"


def test_every_base_file_is_used():
    used = set()
    for path in CONFIGS.glob("*/*.yaml"):
        base = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("base")
        if base:
            used.add((path.parent / base).resolve())
    unused = [preset_key(p) for p in CONFIGS.glob("*/_*.yaml") if p.resolve() not in used]
    assert not unused, f"base files no preset names: {unused}"


def test_saved_run_config_is_resolved_and_has_no_base(tmp_path):
    """``harness train`` saves ``to_dict`` of what ``build_config`` returns; ``--resume`` reads it back as is."""
    from harness.train import build_config
    from harness.train_config import TrainConfig

    path = CONFIGS / "tiny" / "mgrpo_align_none.yaml"  # two levels: -> mgrpo.yaml -> _base.yaml
    args = argparse.Namespace(overrides=["rollout.k=2"], resume=None, config=str(path), trainer="mgrpo", seed=None,
                              max_steps=None, run_dir=str(tmp_path / "run"))
    cfg, run_dir = build_config(args)
    saved = yaml.safe_dump(to_dict(cfg), sort_keys=False)
    data = yaml.safe_load(saved)
    assert "base" not in data and cfg.alignment.mode == "none" and cfg.k == 2
    expected = json.loads(FIXTURE.read_text(encoding="utf-8"))["tiny/mgrpo_align_none.yaml"]
    expected.update(run_id="run")
    expected["rollout"]["k"] = 2
    assert json.loads(json.dumps(data)) == expected
    # --resume: the saved file loads on its own, with nothing left to inherit
    (run_dir).mkdir()
    (run_dir / "config.yaml").write_text(saved)
    again, _ = build_config(argparse.Namespace(overrides=[], resume=str(run_dir), config=None, trainer=None,
                                                seed=None, max_steps=None, run_dir=None))
    assert to_dict(again) == to_dict(cfg)
    assert isinstance(again, TrainConfig)


# ------------------------------------------------------------------ base: semantics
def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_base_merges_mappings_key_by_key_and_replaces_lists_and_scalars(tmp_path):
    _write(tmp_path, "_base.yaml", "seed: 0\nrollout: {k: 4, planner_turns: 4}\n"
                                   "tasks: {benchmarks: [gaia, xbench], n_train: 20}\nplanner: {trl: {a: 1, b: 2}}\n")
    child = _write(tmp_path, "child.yaml", "base: _base.yaml\nseed: 3\nrollout: {k: 8}\n"
                                          "tasks: {benchmarks: [webwalkerqa]}\nplanner: {trl: {b: 5}}\n")
    assert load_yaml(child) == {"seed": 3, "rollout": {"k": 8, "planner_turns": 4},
                                "tasks": {"benchmarks": ["webwalkerqa"], "n_train": 20},
                                "planner": {"trl": {"a": 1, "b": 5}}}


def test_base_chains_and_paths_are_relative_to_the_file(tmp_path):
    _write(tmp_path, "common/_root.yaml", "seed: 1\nworld: {size: tiny, seed: 5}\n")
    _write(tmp_path, "family/_base.yaml", "base: ../common/_root.yaml\nworld: {size: small}\nthreads: 2\n")
    _write(tmp_path, "family/a.yaml", "base: _base.yaml\ntrainer: mgrpo\n")
    leaf = _write(tmp_path, "family/b.yaml", "base: a.yaml\nthreads: 4\nworld: {seed: 6}\n")
    assert load_yaml(leaf) == {"seed": 1, "world": {"size": "small", "seed": 6}, "threads": 4, "trainer": "mgrpo"}
    # the base key never reaches the dataclass (it is not a config field)
    assert "base" not in load_yaml(tmp_path / "family/_base.yaml")


def test_a_value_can_be_reset_to_null_or_replaced_by_another_kind(tmp_path):
    _write(tmp_path, "_base.yaml", "tasks: {max_hops: 1, n_train: 3}\nreport_to: [tensorboard]\n")
    child = _write(tmp_path, "c.yaml", "base: _base.yaml\ntasks: {max_hops: null}\nreport_to: none\n")
    assert load_yaml(child) == {"tasks": {"max_hops": None, "n_train": 3}, "report_to": "none"}


def test_base_does_not_change_the_base_file_data(tmp_path):
    base = _write(tmp_path, "_base.yaml", "rollout: {k: 4}\n")
    child = _write(tmp_path, "c.yaml", "base: _base.yaml\nrollout: {k: 8}\n")
    assert load_yaml(child) == {"rollout": {"k": 8}}
    assert load_yaml(base) == {"rollout": {"k": 4}}


def test_missing_base_is_an_error_naming_both_files(tmp_path):
    child = _write(tmp_path, "c.yaml", "base: nowhere.yaml\nseed: 1\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: base 'nowhere\.yaml' not found.*nowhere\.yaml"):
        load_yaml(child)


def test_base_cycle_is_an_error_naming_the_files(tmp_path):
    _write(tmp_path, "a.yaml", "base: b.yaml\nseed: 1\n")
    _write(tmp_path, "b.yaml", "base: c.yaml\n")
    _write(tmp_path, "c.yaml", "base: a.yaml\n")
    with pytest.raises(ConfigError, match=r"cycle.*a\.yaml -> .*b\.yaml -> .*c\.yaml -> .*a\.yaml"):
        load_yaml(tmp_path / "a.yaml")
    _write(tmp_path, "self.yaml", "base: self.yaml\n")
    with pytest.raises(ConfigError, match=r"cycle.*self\.yaml -> .*self\.yaml"):
        load_yaml(tmp_path / "self.yaml")


@pytest.mark.parametrize("value", ["[a.yaml]", "3", "''", "null"])
def test_base_must_name_one_file(tmp_path, value):
    child = _write(tmp_path, "c.yaml", f"base: {value}\nseed: 1\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: base: expected the path of one preset file"):
        load_yaml(child)


def test_errors_in_a_base_name_the_base_file(tmp_path):
    _write(tmp_path, "_base.yaml", "seed: [unclosed\n")
    child = _write(tmp_path, "c.yaml", "base: _base.yaml\n")
    with pytest.raises(ConfigError, match=r"_base\.yaml: not valid YAML"):
        load_yaml(child)
    _write(tmp_path, "_list.yaml", "- a\n- b\n")
    child = _write(tmp_path, "d.yaml", "base: _list.yaml\n")
    with pytest.raises(ConfigError, match=r"_list\.yaml: the top level must be a mapping"):
        load_yaml(child)


def test_inherited_unknown_key_still_fails_validation(tmp_path):
    from harness.train_config import TrainConfig

    _write(tmp_path, "_base.yaml", "trainer: mgrpo\nplanner: {max_steps: 2, groups_per_step: 1, lr: 0.1}\n")
    child = _write(tmp_path, "c.yaml", "base: _base.yaml\nrollout: {k: 2}\nalignment: {d: 1}\n")
    with pytest.raises(ConfigError, match=r"c\.yaml\.planner: unknown key\(s\) \['lr'\]"):
        load_config(TrainConfig, child)


# ------------------------------------------------------------------ regenerate the fixture
def write_fixture() -> None:
    data = {preset_key(p): resolve(p) for p in shipped_presets()}
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE} ({len(data)} presets)")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.harness.test_presets --write   (regenerates the resolved-presets fixture)")
    write_fixture()
