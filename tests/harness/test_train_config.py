"""The typed run config (harness/train_config.py) and the shipped presets (baselines/configs, accelerate)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import ConfigError, from_dict, load_config
from harness.train_config import LOSS_TYPES, TrainConfig, load_train_config

ROOT = Path(__file__).resolve().parents[2]
#: Training presets; ``warmstart.yaml`` files are warm-start presets (checked below) and ``_*.yaml`` files are
#: the partial bases presets inherit from (``base:``; tests/harness/test_presets.py checks the resolved values).
PRESETS = sorted(p for p in (ROOT / "baselines" / "configs").glob("*/*.yaml")
                 if p.name != "warmstart.yaml" and not p.name.startswith("_"))
WARMSTART_PRESETS = sorted((ROOT / "baselines" / "configs").glob("*/warmstart.yaml"))


def test_presets_exist_for_every_trainer_and_size():
    names = {p.relative_to(ROOT / "baselines" / "configs").as_posix() for p in PRESETS}
    for trainer in ("single_agent", "frozen_sub", "mgrpo"):
        assert f"tiny/{trainer}.yaml" in names
        assert f"smollm2/{trainer}.yaml" in names
        assert f"paper/{trainer}_stage1.yaml" in names and f"paper/{trainer}_stage2.yaml" in names
    assert "tiny/mgrpo_align_none.yaml" in names


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_preset_loads_and_validates(path):
    cfg = load_train_config(str(path))
    assert cfg.trainer in path.name
    assert cfg.k >= 2 and cfg.planner.max_steps and cfg.planner.groups_per_step
    if cfg.trainer == "mgrpo":
        assert cfg.sub_max_steps * cfg.sub_groups <= cfg.planner_steps * cfg.planner_groups


@pytest.mark.parametrize("path", WARMSTART_PRESETS, ids=lambda p: p.parent.name)
def test_warmstart_presets_load_and_match_their_training_world(path):
    from harness.warmstart import WarmstartConfig

    ws = load_config(WarmstartConfig, str(path))
    train = load_train_config(str(path.parent / "mgrpo.yaml"))
    # the tokenizer and the demonstrations come from the world the trainers then run in
    assert (ws.world_seed, ws.world_size) == (train.world.seed, train.world.size)
    # ... and the search results look as they did in the demonstrations
    assert ws.search_top_k == train.tools.search_top_k
    assert ws.search_snippets == train.tools.search_snippets
    # ... and pages are ordered for the visit's goal as they were (docs/tools.md, "The goal-guided visit")
    assert ws.visit_focus == train.tools.visit_focus
    assert ws.visit_links == train.tools.visit_links
    # ... and a turn may be as long as the build's check let it be (the longest demonstrated turn fits)
    assert ws.eval_max_new_tokens == train.rollout.max_new_tokens


def test_paper_preset_has_the_paper_hyperparameters():
    for stage in (1, 2):
        cfg = load_train_config(str(ROOT / f"baselines/configs/paper/mgrpo_stage{stage}.yaml"))
        assert cfg.k == 8 and cfg.alignment.d == 8 and cfg.sub_group_size == 64
        for role in (cfg.planner, cfg.sub):
            assert role.learning_rate == 1e-6 and role.epsilon == 0.2 and role.epsilon_high == 0.28 and role.beta == 0
        assert cfg.store.url.startswith("redis://")
    s1 = load_train_config(str(ROOT / "baselines/configs/paper/mgrpo_stage1.yaml"))
    s2 = load_train_config(str(ROOT / "baselines/configs/paper/mgrpo_stage2.yaml"))
    assert s1.tasks.max_hops == 1 and s1.tasks.hard_filter is None  # stage 1: simple tasks
    assert s2.tasks.hard_filter and s2.models.planner.endswith("checkpoint-100")  # stage 2 starts from stage 1


def test_tiny_preset_is_cpu_friendly():
    cfg = load_train_config(str(ROOT / "baselines/configs/tiny/mgrpo.yaml"))
    assert cfg.tools.visit_backend == "direct" and cfg.world.size == "tiny" and cfg.models.planner == "tiny"
    assert cfg.store.url is None  # sqlite in the run dir
    none = load_train_config(str(ROOT / "baselines/configs/tiny/mgrpo_align_none.yaml"))
    assert none.alignment.mode == "none"


def _base(**over):
    data = {"trainer": "mgrpo", "rollout": {"k": 4}, "alignment": {"d": 2},
            "planner": {"max_steps": 4, "groups_per_step": 2}}
    for key, value in over.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return data


def test_inconsistent_planner_batch_names_what_to_change():
    with pytest.raises(ConfigError, match=r"planner\.groups_per_step \* rollout\.k = 3 \* 4 = 12 .*divisible.* = 8"):
        from_dict(TrainConfig, _base(planner={"groups_per_step": 3, "gradient_accumulation_steps": 8}))


def test_a_group_may_not_straddle_two_planner_processes():
    """2 processes and 1 group of K=4 divide the batch evenly, but each rank would hold half a group."""
    with pytest.raises(ConfigError, match=r"groups_per_step=1 query groups cannot be split over planner\.num_processes=2 "
                                          r"processes without a group of rollout\.k=4 straddling two ranks"):
        from_dict(TrainConfig, _base(planner={"groups_per_step": 1, "num_processes": 2}))
    cfg = from_dict(TrainConfig, _base(planner={"groups_per_step": 2, "num_processes": 2}))
    assert cfg.planner.micro_batches == 2


def test_a_group_may_not_straddle_two_sub_processes():
    """The sub role's groups (d*K sub-trajectories each) are handed to its ranks whole; a frozen sub-agent's role
    is the service alone and stays one process."""
    with pytest.raises(ConfigError, match=r"sub\.groups_per_step=1 query groups cannot be split over sub\.num_processes=2 "
                                          r"processes without a group of alignment\.d \* rollout\.k = 8 straddling"):
        from_dict(TrainConfig, _base(sub={"groups_per_step": 1, "num_processes": 2}))
    cfg = from_dict(TrainConfig, _base(sub={"num_processes": 2}))  # 2 groups per step: one per rank
    assert cfg.sub.micro_batches == 2
    with pytest.raises(ConfigError, match="sub-agent is frozen.*set sub.num_processes=1"):
        from_dict(TrainConfig, _base(trainer="frozen_sub", sub={"num_processes": 2}))


def test_a_sharded_launch_needs_a_vllm_server():
    """ZeRO-3 and FSDP shard the parameters: the in-process HF generator cannot generate with a shard, so a role
    launched that way without vllm_url stops at start with the reason and the fix (docs/training.md)."""
    from harness.role.common import check_generation_backend, sharded_launch

    zero3 = {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}
    fsdp = {"ACCELERATE_USE_FSDP": "true"}
    assert (sharded_launch(zero3), sharded_launch(fsdp), sharded_launch({})) == ("ZeRO-3", "FSDP", None)
    assert sharded_launch({**zero3, "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}) is None  # ZeRO-2: whole weights
    cfg = from_dict(TrainConfig, _base())
    with pytest.raises(ConfigError, match=r"planner: launched with ZeRO-3, .* planner\.vllm_url is not set.*ddp\.yaml"):
        check_generation_backend(cfg, "planner", zero3)
    with pytest.raises(ConfigError, match=r"sub: launched with FSDP"):
        check_generation_backend(cfg, "sub", fsdp)
    check_generation_backend(cfg, "planner", {})  # one process: fine
    cfg.planner.vllm_url = "http://planner-vllm:8000"
    check_generation_backend(cfg, "planner", zero3)  # generation on the server: fine


def test_the_sub_agent_judge_reference_is_checked():
    """``rewards.sub_expert_reference`` (docs/paper.md, Rewards): 'gold' (the default) or 'delegated'; the latter
    solves subtasks in the offline world, so a run on the real web is refused with the fix."""
    assert from_dict(TrainConfig, _base()).rewards.sub_expert_reference == "gold"
    assert from_dict(TrainConfig, _base(rewards={"sub_expert_reference": "delegated"})).rewards.sub_expert_reference \
        == "delegated"
    with pytest.raises(ConfigError, match=r"rewards\.sub_expert_reference: 'planner' is not one of \['gold', 'delegated'\]"):
        from_dict(TrainConfig, _base(rewards={"sub_expert_reference": "planner"}))
    with pytest.raises(ConfigError, match=r"tools\.search_backend=realweb .* set rewards\.sub_expert_reference=gold"):
        from_dict(TrainConfig, _base(rewards={"sub_expert_reference": "delegated"}, tools={"search_backend": "realweb"}))
    # a frozen sub-agent is never judged: nothing to refuse
    from_dict(TrainConfig, _base(trainer="frozen_sub", rewards={"sub_expert_reference": "delegated"},
                                 tools={"search_backend": "realweb"}))


def test_inconsistent_sub_batch_names_what_to_change():
    with pytest.raises(ConfigError, match=r"sub\.groups_per_step \* alignment\.d \* rollout\.k = 1 \* 2 \* 4 = 8.*sub\.gradient"):
        from_dict(TrainConfig, _base(sub={"groups_per_step": 1, "gradient_accumulation_steps": 3}))


def test_the_fifo_ablation_may_take_smaller_chunks_than_d_times_k():
    """``alignment.chunk`` (docs/paper.md, "Ablation"): the ``none`` ablation's sub-agent group is its FIFO chunk of
    raw sub-trajectories; null keeps d*K. It means nothing for query-aligned groups (refused there), a chunk of one
    has no advantage (refused), and the batch checks speak of the chunk, not of d*K."""
    assert from_dict(TrainConfig, _base(alignment={"mode": "none"})).sub_group_size == 8  # d*K
    cfg = from_dict(TrainConfig, _base(alignment={"mode": "none", "chunk": 3}))
    assert cfg.sub_group_size == 3
    with pytest.raises(ConfigError, match=r"alignment\.chunk=4 applies to alignment\.mode=none only"):
        from_dict(TrainConfig, _base(alignment={"chunk": 4}))
    with pytest.raises(ConfigError, match=r"alignment\.chunk=1 must be an integer >= 2"):
        from_dict(TrainConfig, _base(alignment={"mode": "none", "chunk": 1}))
    with pytest.raises(ConfigError, match=r"sub\.groups_per_step \* alignment\.chunk = 1 \* 3 = 3 must be divisible"):
        from_dict(TrainConfig, _base(alignment={"mode": "none", "chunk": 3},
                                     sub={"groups_per_step": 1, "gradient_accumulation_steps": 2}))
    with pytest.raises(ConfigError, match=r"without a group of alignment\.chunk = 3 straddling"):
        from_dict(TrainConfig, _base(alignment={"mode": "none", "chunk": 3}, sub={"groups_per_step": 1, "num_processes": 2}))


def test_sub_cannot_need_more_groups_than_the_planner_makes():
    with pytest.raises(ConfigError, match=r"lower sub\.max_steps"):
        from_dict(TrainConfig, _base(sub={"max_steps": 9}))
    cfg = from_dict(TrainConfig, _base())
    assert cfg.sub_max_steps == 4 and cfg.sub_groups == 2  # null = follow the planner


def test_clear_errors_for_bad_values():
    with pytest.raises(ConfigError, match="unknown key"):
        from_dict(TrainConfig, _base(planner={"lr": 1e-3}))
    with pytest.raises(ConfigError, match="at least 2 rollouts"):
        from_dict(TrainConfig, _base(rollout={"k": 1}))
    with pytest.raises(ConfigError, match=r"trainer='ppo'"):
        from_dict(TrainConfig, _base(trainer="ppo"))
    with pytest.raises(ConfigError, match="alignment.mode"):
        from_dict(TrainConfig, _base(alignment={"mode": "random"}))
    with pytest.raises(ConfigError, match="loss_type='reinforce'"):
        from_dict(TrainConfig, _base(planner={"loss_type": "reinforce"}))
    with pytest.raises(ConfigError, match="store.url"):
        from_dict(TrainConfig, _base(store={"url": "postgres://x"}))
    with pytest.raises(ConfigError, match="planner.max_steps is required"):
        from_dict(TrainConfig, {"trainer": "single_agent", "planner": {"groups_per_step": 1}})


def test_advantage_fn_resolves_or_names_what_to_change():
    from harness.train_config import resolve_advantage_fn
    from mgrpo.advantage import group_advantages

    assert resolve_advantage_fn("mgrpo.advantage:group_advantages") is group_advantages
    flipped = resolve_advantage_fn("tests.support.broken_advantage:sign_flipped")
    assert flipped([1.0, 0.0]) == [-a for a in group_advantages([1.0, 0.0])]
    for bad, msg in [("group_advantages", "module:function"), ("no_such_mod:f", "cannot import"),
                     ("mgrpo.advantage:nope", "no attribute")]:
        with pytest.raises(ConfigError, match=msg):
            from_dict(TrainConfig, _base(planner={"advantage_fn": bad}))
    with pytest.raises(ConfigError, match=r"tasks.test_fraction"):
        from_dict(TrainConfig, _base(tasks={"test_fraction": 1.5}))


def test_overrides_win_over_the_file(tmp_path):
    path = ROOT / "baselines/configs/tiny/frozen_sub.yaml"
    cfg = load_config(TrainConfig, path, ["rollout.k=2", "planner.max_steps=3", "alignment.mode=none"])
    assert (cfg.k, cfg.planner.max_steps, cfg.alignment.mode) == (2, 3, "none")


def test_exponent_numbers_without_a_dot_are_numbers():
    """YAML 1.1 reads ``8e-3`` as a string; a researcher typing ``planner.learning_rate=8e-3`` means the number."""
    path = ROOT / "baselines/configs/tiny/mgrpo.yaml"
    cfg = load_config(TrainConfig, path, ["planner.learning_rate=8e-3", "sub.learning_rate=1E-6"])
    assert (cfg.planner.learning_rate, cfg.sub.learning_rate) == (0.008, 1e-06)
    with pytest.raises(ConfigError, match="expected a number"):
        load_config(TrainConfig, path, ["planner.learning_rate=fast"])


def test_loss_types_match_the_trainer():
    from mgrpo.trainer import LOSS_TYPES as TRAINER_LOSS_TYPES

    assert LOSS_TYPES == TRAINER_LOSS_TYPES


@pytest.mark.parametrize("name", ["ddp", "zero2", "zero3", "fsdp2", "cpu"])
def test_accelerate_configs_load(name):
    from accelerate.commands.config.config_args import ClusterConfig

    cfg = ClusterConfig.from_yaml_file(str(ROOT / "baselines" / "accelerate" / f"{name}.yaml"))
    expected = {"ddp": "MULTI_GPU", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED", "fsdp2": "FSDP", "cpu": "MULTI_GPU"}[name]
    assert cfg.distributed_type.name == expected
    if name.startswith("zero"):
        assert cfg.deepspeed_config["zero_stage"] == int(name[-1])
    if name == "fsdp2":
        assert cfg.fsdp_config["fsdp_version"] == 2


def test_mgrpo_args_derive_batch_sizes(tmp_path):
    from harness.role.common import mgrpo_args

    cfg = from_dict(TrainConfig, _base(planner={"gradient_accumulation_steps": 2}))
    args = mgrpo_args(cfg, "planner", tmp_path, cfg.k, cfg.planner_groups, cfg.planner_steps)
    assert args.num_generations == 4 and args.per_device_train_batch_size == 4  # 2 groups * 4 / 2 micro-batches
    assert args.loss_type == "mgrpo" and args.epsilon_high == 0.28 and args.beta == 0.0
    sub = mgrpo_args(cfg, "sub", tmp_path, cfg.sub_group_size, cfg.sub_groups, cfg.sub_max_steps)
    assert sub.num_generations == 8 and sub.per_device_train_batch_size == 16
    bad = from_dict(TrainConfig, _base(planner={"num_processes": 2}))
    with pytest.raises(ConfigError, match="planner.num_processes=2 but this role runs with 1"):
        mgrpo_args(bad, "planner", tmp_path, bad.k, bad.planner_groups, bad.planner_steps)


def _pretend_installed(monkeypatch, *installed: str, missing: tuple[str, ...] = ()) -> None:
    """Make ``importlib.util.find_spec`` see (or not see) tracker packages, whatever this venv holds."""
    import importlib.util

    real = importlib.util.find_spec

    def find_spec(name, *args):
        if name in installed:
            return object()
        return None if name in missing else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_report_to_is_none_by_default_and_checked(monkeypatch):
    assert from_dict(TrainConfig, _base()).report_to == "none"
    with pytest.raises(ConfigError, match=r"report_to='mlflow': choose none, one of \['tensorboard', 'trackio', 'wandb'\]"):
        from_dict(TrainConfig, _base(report_to="mlflow"))
    with pytest.raises(ConfigError, match=r"report_to=\['none', 'wandb'\]: choose none"):
        from_dict(TrainConfig, _base(report_to=["none", "wandb"]))
    _pretend_installed(monkeypatch, "trackio", missing=("wandb", "tensorboard", "tensorboardX"))
    with pytest.raises(ConfigError, match=r"report_to='wandb': the wandb package is not installed .*pip install wandb"):
        from_dict(TrainConfig, _base(report_to="wandb"))
    with pytest.raises(ConfigError, match=r"report_to='tensorboard': .*pip install tensorboard"):
        load_train_config(str(ROOT / "baselines/configs/tiny/mgrpo.yaml"), ["report_to=[trackio,tensorboard]"])
    assert from_dict(TrainConfig, _base(report_to=["trackio"])).report_to == ["trackio"]


def test_mgrpo_args_pass_report_to_and_a_run_name_per_role(tmp_path, monkeypatch):
    import os

    from harness.role.common import mgrpo_args

    run = tmp_path / "mgrpo-s0-x"
    cfg = from_dict(TrainConfig, _base())
    args = mgrpo_args(cfg, "planner", run / "planner" / "checkpoints", cfg.k, cfg.planner_groups, cfg.planner_steps)
    assert args.report_to == [] and args.run_name == "mgrpo-s0-x-planner"  # "none": TRL reports nowhere
    _pretend_installed(monkeypatch, "tensorboard", "trackio")
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)  # restored after the test
    cfg = from_dict(TrainConfig, _base(report_to=["tensorboard", "trackio"]))
    sub = mgrpo_args(cfg, "sub", run / "sub" / "checkpoints", cfg.sub_group_size, cfg.sub_groups, cfg.sub_max_steps)
    assert sub.report_to == ["tensorboard", "trackio"] and sub.run_name == "mgrpo-s0-x-sub"
    # transformers 5 has no logging_dir argument; its TensorBoard callback reads this variable
    assert os.environ["TENSORBOARD_LOGGING_DIR"] == str(run / "sub" / "tensorboard")


#: Every config dataclass of the project: ``module:Class``. The test below also scans the sources, so a new
#: ``*Config`` / ``*Section`` dataclass must be listed here (and follow the convention).
CONFIG_CLASSES = [
    "harness.train_config:TrainConfig", "harness.train_config:ModelsConfig", "harness.train_config:WorldSection",
    "harness.train_config:TasksConfig", "harness.train_config:RewardsConfig", "harness.train_config:AlignmentConfig",
    "harness.train_config:RoleTrainConfig", "harness.train_config:StoreSection", "harness.train_config:ServiceConfig",
    "harness.train_config:EvalConfig", "harness.train_config:UnseenEvalConfig", "harness.rollout:RolloutConfig",
    "harness.tools.toolbox:ToolsConfig",
    "harness.tools.realweb:RealWebSearchConfig", "harness.tools.browser:BrowserConfig",
    "harness.warmstart:WarmstartConfig", "harness.world.expert:ExpertConfig", "harness.world.generator:WorldConfig",
    "harness.world.tasks:TaskConfig", "harness.models:TinyModelConfig", "harness.models:ModelSpec",
    "mgrpo.trainer:MGRPOConfig",
]


def _config_class(spec: str) -> type:
    import importlib

    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("spec", CONFIG_CLASSES)
def test_every_config_field_is_typed_and_has_a_help_text(spec):
    """One convention across the project: a dataclass, a type hint and ``metadata={"help": ...}`` per field
    (``harness.config.help_field``; TRL's own ``field(metadata=...)`` in ``mgrpo/``)."""
    import dataclasses
    import inspect

    cls = _config_class(spec)
    assert dataclasses.is_dataclass(cls)
    own = inspect.get_annotations(cls)  # MGRPOConfig: its own fields, not all of TRL's
    fields = [f for f in dataclasses.fields(cls) if f.name in own]
    assert fields
    missing = [f.name for f in fields if not str(f.metadata.get("help", "")).strip()]
    assert not missing, f"{spec}: fields without a help text: {missing}"


def test_config_class_list_is_complete():
    import re

    listed = {spec.partition(":")[2] for spec in CONFIG_CLASSES}
    found = set()
    for folder in ("harness", "mgrpo", "benchmarks", "baselines"):
        for path in (ROOT / folder).rglob("*.py"):
            found |= set(re.findall(r"@(?:dataclasses\.)?dataclass[^\n]*\nclass (\w+(?:Config|Section))\b",
                                    path.read_text(encoding="utf-8")))
    assert found <= listed, f"config dataclasses not in CONFIG_CLASSES: {sorted(found - listed)}"


def test_fields_shared_with_mgrpo_config_are_declared_once():
    """``RoleTrainConfig`` and ``MGRPOConfig`` take the fields both have from ``mgrpo.options`` (one place)."""
    import dataclasses
    import inspect

    from harness.train_config import RoleTrainConfig
    from mgrpo.loss import RATIO_LEVELS as LOSS_RATIO_LEVELS
    from mgrpo.options import OPTIONS, RATIO_LEVELS
    from mgrpo.trainer import MGRPOConfig

    role = {f.name: f for f in dataclasses.fields(RoleTrainConfig)}
    trl = {f.name: f for f in dataclasses.fields(MGRPOConfig)}
    shared = sorted(set(role) & set(inspect.get_annotations(MGRPOConfig)))
    assert shared == sorted(OPTIONS) == ["bf16", "epsilon_high", "gradient_checkpointing", "loss_type", "old_logprobs",
                                         "ratio_level", "unpadded_forward"]
    for name, opt in OPTIONS.items():
        for f in (role[name], trl[name]):
            assert f.default == opt.default and f.metadata["help"] == opt.help
            assert f.metadata.get("choices") == (list(opt.choices) if opt.choices else None)
    assert RATIO_LEVELS == LOSS_RATIO_LEVELS
    role_cfg = RoleTrainConfig()
    assert (role_cfg.loss_type, role_cfg.ratio_level, role_cfg.epsilon_high, role_cfg.bf16) == \
        ("mgrpo", "sequence", 0.28, None)


def test_loading_a_preset_imports_neither_torch_nor_trl():
    """The launcher validates a config before anything heavy starts; the options shared with ``MGRPOConfig``
    come from the torch-free ``mgrpo.options``. A fresh interpreter, since this one has torch loaded already."""
    import subprocess
    import sys

    code = ("import sys; from harness.train_config import load_train_config; "
            "load_train_config('baselines/configs/paper/mgrpo_stage2.yaml'); "
            "print(sorted(m for m in ('torch', 'trl', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("overrides, message", [
    (["eval.runs=0"], r"eval.runs=0 must be >= 1"),
    (["eval.temperature=-0.5"], r"eval.temperature=-0.5 must be >= 0"),
    (["eval.temperature=0"], r"eval.runs=3 with eval.temperature=0 repeats one greedy run"),
    (["rollout.temperature=0"], r"eval.runs=3 with rollout.temperature=0 \(eval.temperature null\)"),
])
def test_bad_evaluation_runs_are_clear_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_train_config(str(ROOT / "baselines/configs/tiny/mgrpo.yaml"), overrides)


def test_evaluation_defaults_to_three_sampled_runs_at_the_rollout_temperature():
    cfg = load_train_config(str(ROOT / "baselines/configs/tiny/mgrpo.yaml"))
    assert cfg.eval.runs == 3 and cfg.eval_temperature == cfg.rollout.temperature == 1.0
    greedy = load_train_config(str(ROOT / "baselines/configs/tiny/mgrpo.yaml"), ["eval.runs=1", "eval.temperature=0"])
    assert greedy.eval_temperature == 0.0
