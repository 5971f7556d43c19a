"""Warm start (docs/world.md, docs/models.md): demonstrations from the scripted expert, tokenised as rollouts are,
loss on model tokens only; the command end to end on a tiny budget."""

from __future__ import annotations

import json

import pytest

from harness.agents.parsing import ToolCall, parse_turn
from harness.agents.prompts import EpisodeTokens, agent_prompt, initial_messages
from harness.config import ConfigError, load_config
from harness.models import load_model
from harness.warmstart import WarmstartConfig, expert_demonstrations, main, prepare, recheck, tokenize_transcript
from harness.world.generator import generate_world
from harness.world.tasks import TaskConfig, generate_tasks
from harness.world.toolbox import WorldToolbox


@pytest.fixture(scope="module")
def demos():
    world = generate_world(seed=3, size="tiny")
    tasks = generate_tasks(world, TaskConfig(n_train=4, n_test=1))
    train = [t for (b, s), ts in sorted(tasks.tasks.items()) if s == "train" for t in ts]
    return expert_demonstrations(train, WorldToolbox(world), noise=0.0, seed=0), len(train)


@pytest.fixture(scope="module")
def tokenizer():
    return load_model("tiny")[1]


def test_demonstrations_use_the_agents_own_prompts(demos):
    d, n = demos
    assert d.n_tasks == n and d.n_correct == n  # noise 0: every verified task is solved
    assert len(d.planner) == len(d.single_agent) == n
    assert len(d.sub_agent) >= n  # at least one delegation per task
    for agent in ("planner", "sub_agent", "single_agent"):
        for msgs in d.of(agent):
            assert msgs[0] == initial_messages(agent, "x")[0]  # the agent's own system prompt
            assert msgs[-1]["role"] == "assistant" and msgs[-1]["content"].startswith("<answer>")
            for m in msgs[2:]:
                if m["role"] == "assistant" and m is not msgs[-1]:
                    parsed = parse_turn(m["content"], agent_prompt(agent).allowed_tools)
                    assert isinstance(parsed, ToolCall), (agent, m["content"])
    # the single agent does the searching itself: no delegate, and as many answers as tasks
    assert all('"delegate"' not in m["content"] for msgs in d.single_agent for m in msgs)


def test_labels_cover_exactly_the_assistant_turns(demos, tokenizer):
    d, _ = demos
    for agent in ("planner", "sub_agent", "single_agent"):
        codec = EpisodeTokens(tokenizer, agent_prompt(agent).tools)
        msgs = d.of(agent)[0]
        ex = tokenize_transcript(codec, msgs)
        assert len(ex["input_ids"]) == len(ex["labels"])
        learned = [t for t in ex["labels"] if t != -100]
        expected = "".join(m["content"] + "<|im_end|>" for m in msgs if m["role"] == "assistant")
        assert tokenizer.decode(learned, skip_special_tokens=False) == expected
        # the whole example is the template's own rendering of the conversation
        codec.check(msgs)


@pytest.mark.slow
def test_warmstart_command_end_to_end(tmp_path, capsys):
    out = tmp_path / "ws"
    rc = main(["--out", str(out), "n_train_tasks=2", "n_test_tasks=1", "eval_tasks=2", "max_steps=1",
               "batch_size=2", "world_size=tiny", "eval_max_new_tokens=8"])
    assert rc == 0
    summary = json.loads((out / "warmstart.json").read_text())
    for agent in ("planner", "sub_agent", "single_agent"):
        assert (out / agent / "config.json").is_file() and (out / agent / "tokenizer.json").is_file()
        assert summary["agents"][agent]["steps"] == 1 and summary["agents"][agent]["n_examples"] >= 1
    for mode in ("greedy", "sampled"):
        check = summary["check"][mode]
        assert check["n_tasks"] == 2 and 0.0 <= check["valid_turns"] <= 1.0 and check["turns"] >= 2
    assert set(summary["stages"]) >= {"world_s", "expert_s", "sft_planner_s", "check_s", "total_s"}
    # a saved agent loads back as a model directory
    model, tok = load_model(str(out / "planner"))
    assert model.config.model_type == "qwen3" and tok.chat_template


@pytest.mark.slow
def test_joint_warmstart_trains_one_model_saved_as_every_agent(tmp_path):
    import torch

    out = tmp_path / "ws"
    args = ["joint=true", "n_train_tasks=2", "n_test_tasks=1", "eval_tasks=1", "max_steps=2", "batch_size=2",
            "world_size=tiny", "eval_max_new_tokens=8", "agents=[planner,sub_agent]", "repeat={planner: 3}",
            "group_by_length=true", "copy_steps=3", "copy_batch_size=4", "loss_tokens=all", "copy_alphabet=all",
            "copy_mix=0.5"]
    rc = main(["--out", str(out), *args])
    assert rc == 0
    summary = json.loads((out / "warmstart.json").read_text())
    assert list(summary["agents"]) == ["joint"] and summary["agents"]["joint"]["steps"] == 2
    # the copy drill ran first and logged the induction probe at its last step
    probe = summary["agents"]["joint"]["copy_drill"]["probe_log"]
    assert [r["step"] for r in probe] == [3] and probe[0]["repeat_loss"] > 0 and probe[0]["first_loss"] > 0
    # the planner's transcripts count three times (repeat), the sub-agent's once
    prep = prepare(load_config(WarmstartConfig, None, args))
    n_planner, n_sub = len(prep.examples("planner")), len(prep.examples("sub_agent"))
    joint = summary["agents"]["joint"]
    # and half as many copy-drill sequences again (copy_mix) keep the induction heads through the SFT
    n_demo = 3 * n_planner + n_sub - joint["dropped_too_long"]
    assert joint["n_examples"] == n_demo + round(0.5 * n_demo) and n_planner >= 1
    planner, _ = load_model(str(out / "planner"))
    sub, _ = load_model(str(out / "sub_agent"))
    for (name, a), (_, b) in zip(planner.state_dict().items(), sub.state_dict().items()):
        assert torch.equal(a, b), name
    assert not (out / "sub_agent" / "trainer").exists()
    assert summary["check"]["greedy"]["n_tasks"] == 1


def test_a_resumed_build_skips_the_copy_drill_its_checkpoint_went_through(tmp_path):
    out = tmp_path / "ws"
    args = ["joint=true", "n_train_tasks=2", "n_test_tasks=1", "eval_tasks=0", "gate_tasks=0", "batch_size=2",
            "world_size=tiny", "agents=[planner,sub_agent]", "copy_steps=3", "copy_batch_size=4", "save_steps=2"]
    assert main(["--out", str(out), *args, "max_steps=2"]) == 0
    first = json.loads((out / "warmstart.json").read_text())["agents"]["joint"]
    assert first["copy_drill"]["steps"] == 3 and first["resumed_from"] is None
    assert main(["--out", str(out), *args, "max_steps=4"]) == 0  # as after a kill at step 2
    second = json.loads((out / "warmstart.json").read_text())["agents"]["joint"]
    assert "copy_drill" not in second and second["resumed_from"].endswith("checkpoint-2") and second["steps"] == 4


def test_init_continues_a_warm_start_with_its_tokenizer_and_weights(tmp_path, capsys):
    """``init``: the fine-tuning starts from an existing warm start's model and keeps its tokenizer (no tokenizer is
    built, even when the demonstrations would have given another one); with a learning rate of 0 the saved model
    is that warm start's, and the build records what it continued from by hash."""
    import torch

    base, more = tmp_path / "base", tmp_path / "more"
    common = ["joint=true", "n_test_tasks=1", "eval_tasks=0", "gate_tasks=0", "max_steps=1", "batch_size=2",
              "world_size=tiny", "agents=[planner,sub_agent]"]
    assert main(["--out", str(base), *common, "n_train_tasks=2"]) == 0
    # other demonstrations (more tasks, another world seed), so a tokenizer built from them would differ
    assert main(["--out", str(more), *common, "n_train_tasks=3", "world_seed=5", "learning_rate=0",
                 f"init={base}"]) == 0
    assert (more / "planner" / "tokenizer.json").read_text() == (base / "planner" / "tokenizer.json").read_text()
    built = prepare(load_config(WarmstartConfig, None, [*common, "n_train_tasks=3", "world_seed=5"])).tokenizer
    assert built.get_vocab() != load_model(str(base / "planner"))[1].get_vocab()  # what init kept it from
    before, _ = load_model(str(base / "planner"))
    after, _ = load_model(str(more / "planner"))
    for (name, a), (_, b) in zip(before.state_dict().items(), after.state_dict().items()):
        assert torch.equal(a, b), name
    summary = json.loads((more / "warmstart.json").read_text())
    assert summary["init"]["path"] == str(base) and set(summary["init"]["sha256"]) >= {"planner/model.safetensors"}
    # a shipped continuation names what it continued from, by hash
    assert main(["--out", str(more), "--ship", str(tmp_path / "ship"), "--from-build", *common, "n_train_tasks=3",
                 "world_seed=5", "learning_rate=0", f"init={base}"]) == 0
    assert json.loads((tmp_path / "ship" / "provenance.json").read_text())["init"] == summary["init"]
    # a missing folder and a copy drill on top of an init are refused before anything runs
    assert main(["--out", str(tmp_path / "x"), *common, f"init={tmp_path / 'nowhere'}"]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert main(["--out", str(tmp_path / "x"), *common, f"init={base}", "copy_steps=3"]) == 2
    assert "set copy_steps: 0 and copy_mix: 0" in capsys.readouterr().err


def test_bad_config_is_a_clear_error(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "agents=[planner,critic]"]) == 2
    assert "unknown ['critic']" in capsys.readouterr().err
    assert main(["--out", str(tmp_path), "nosie=0.1"]) == 2
    assert "unknown key(s) ['nosie']" in capsys.readouterr().err
    assert main(["--out", str(tmp_path), "repeat={planer: 2}"]) == 2
    assert "repeat={'planer': 2}: keys are agents" in capsys.readouterr().err


def test_bad_expert_and_filters_are_clear_errors(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "expert={rates: {guess: 0.5}}"]) == 2
    assert "expert:" in capsys.readouterr().err
    assert main(["--out", str(tmp_path), "benchmarks=[gaia,imagenet]"]) == 2
    assert "benchmarks=" in capsys.readouterr().err
    assert main(["--out", str(tmp_path), "search_top_k=0"]) == 2
    assert "search_top_k" in capsys.readouterr().err


def test_demo_worlds_add_fresh_entities_and_never_a_held_out_answer():
    from harness.warmstart import WarmstartConfig, demo_world_seed, prepare

    cfg = WarmstartConfig(world_size="tiny", benchmarks=["gaia"], max_hops=2, templates=["gaia.person.*"],
                          demo_worlds=3, n_demos=40, search_top_k=3, n_train_tasks=200, n_test_tasks=200)
    cfg.validate()
    seeds = [demo_world_seed(0, i) for i in range(3)]
    assert len(set(seeds)) == 3 and min(seeds) >= 1_000_000  # never a small preset's world seed
    prep = prepare(cfg)
    assert prep.demos.n_tasks == 40 and prep.n_worlds >= 2  # the cap, drawn over several worlds
    assert all(t["gold"]["template"].startswith("gaia.person.") and len(t["gold"]["subtasks"]) <= 2
               for t in prep.train + prep.test)
    # no task from another world mentions a held-out answer entity of the main world (world 0's own
    # train split shares no answer entity with its test split by construction)
    from harness.warmstart import demo_world_tasks

    held_out = {prep.world.entities[e].name for t in prep.test for e in t["gold"]["answer_entities"]}
    assert held_out
    for _, tasks in demo_world_tasks(cfg, held_out=prep.test, world=prep.world):
        for t in tasks:
            text = json.dumps({k: v for k, v in t.items() if k != "gold"}) + str(t["gold"]["answer"])
            assert not any(n in text for n in held_out)
    # the check's tools list 3 hits per search, as the training preset's tools do
    hits = [m["content"] for msgs in prep.demos.sub_agent for m in msgs if m["role"] == "tool" and "URL:" in m["content"]]
    assert hits and all(h.count("URL:") <= 3 for h in hits)


def test_tokenizer_worlds_add_other_worlds_pages_to_the_tiny_tokenizer_corpus():
    small = ["n_train_tasks=2", "n_test_tasks=1", "world_size=tiny", "benchmarks=[gaia]"]
    base = prepare(load_config(WarmstartConfig, None, small))
    more = prepare(load_config(WarmstartConfig, None, [*small, "tokenizer_worlds=1"]))
    extra = set(more.corpus) - set(base.corpus)
    assert len(more.corpus) > len(base.corpus) and extra  # the other world's pages
    assert base.demos.n_tasks == more.demos.n_tasks  # the demonstrations are the same tasks


# ------------------------------------------------------------------ the generalising warm start (letters, gate)
LETTERS = ["tokenizer=letters", "world_demos=false", "demo_worlds=40", "demo_world_tasks=1", "tokenizer_worlds=3",
           "world_size=tiny", "n_train_tasks=2", "n_test_tasks=4", "search_top_k=3"]


@pytest.fixture(scope="module")
def letters_prep():
    return prepare(load_config(WarmstartConfig, None, LETTERS))


@pytest.mark.parametrize("pieces", ["letters", "syllables"])
def test_an_unseen_worlds_names_are_made_of_tokens_training_targets_contain_often(pieces, letters_prep):
    """Every token of every entity name, URL slug and answer of a world no demonstration came from is a
    token the training targets (model turns) contain many times: a name never seen is writable. Letters:
    each at least 10 times; syllables (BPE pieces shared by many names): 99% of the name tokens at least
    once and 95% at least 10 times, in this small build of 40 demonstration worlds."""
    from collections import Counter

    from harness.warmstart import demo_world_seed, entity_strings

    prep = letters_prep if pieces == "letters" else prepare(load_config(
        WarmstartConfig, None, [*LETTERS, "tokenizer=syllables", "vocab_size=2048", "tokenizer_worlds=8"]))
    targets: Counter[int] = Counter()
    for agent in ("planner", "sub_agent", "single_agent"):
        for ex in prep.examples(agent):
            targets.update(t for t in ex["labels"] if t != -100)
    used = {0} | {demo_world_seed(0, i) for i in range(40)}
    unseen_seed = 424242
    assert unseen_seed not in used
    unseen = generate_world(seed=unseen_seed, size="tiny")
    tasks = generate_tasks(unseen, TaskConfig(n_train=3, n_test=3))
    strings = entity_strings(unseen) | {str(t["gold"]["answer"]) for t in tasks.all()}
    tok = prep.tokenizer
    ids = [i for s in strings for i in tok(s, add_special_tokens=False)["input_ids"]]
    never = [i for i in ids if targets[i] == 0]
    rare = [i for i in ids if targets[i] < 10]
    if pieces == "letters":
        assert not never
        assert not rare, f"tokens trained fewer than 10 times: {sorted({tok.convert_ids_to_tokens(i) for i in rare})}"
        # names are spelled: no token spans two letters of a name (template words stay whole)
        name = next(e.name for e in unseen.entities.values() if e.kind == "person")
        assert all(len(t) == 1 for t in tok.tokenize(name.replace(" ", "")))
    else:
        # a rare syllable (e.g. of the category "scanner") may miss in 40 worlds; the build uses hundreds
        assert len(never) <= 0.01 * len(ids) and len(rare) <= 0.05 * len(ids), \
            sorted({tok.convert_ids_to_tokens(i) for i in rare})
        assert tok.tokenize("Thirail") == ["Thi", "rai", "l"]  # consonants-then-vowels pieces
    assert tok.tokenize("Find the year") == ["Find", "Ġ", "the", "Ġ", "year"]


def test_checked_world_never_appears_in_letters_demonstrations(letters_prep):
    prep = letters_prep
    names = {e.name for e in prep.world.entities.values()}
    text = json.dumps([prep.demos.planner, prep.demos.sub_agent, prep.demos.single_agent])
    assert prep.demos.n_tasks >= 6 and not [n for n in names if n in text]


def test_gate_marks_the_name_tokens_of_model_turns_only(letters_prep):
    from harness.warmstart import entity_strings, gate_marks, gate_transcripts

    prep = letters_prep
    demos = gate_transcripts(prep.test[:3], prep.toolbox)
    names = entity_strings(prep.world)
    codec = EpisodeTokens(prep.tokenizer, agent_prompt("sub_agent").tools)
    msgs = demos.sub_agent[0]
    ids, kind = gate_marks(codec, msgs, names)
    assert ids == tokenize_transcript(codec, msgs)["input_ids"] and len(kind) == len(ids)
    labels = tokenize_transcript(codec, msgs)["labels"]
    assert [k >= 0 for k in kind] == [x != -100 for x in labels]  # marks only on model tokens
    occurrences = {}
    for i, k in zip(ids, kind):
        if k > 0:
            occurrences.setdefault(k, []).append(i)
    spelled = {prep.tokenizer.decode(v) for v in occurrences.values()}
    assert spelled and spelled <= names  # each marked run decodes to exactly an entity name or slug
    # the search query copies the task's entity name: its tokens are marked
    query = json.loads(msgs[2]["content"].split(">", 1)[1].rsplit("<", 1)[0])["arguments"]["query"]
    assert query in spelled


def test_copy_gate_scores_an_untrained_model_near_chance(letters_prep):
    import math

    from harness.warmstart import copy_gate, entity_strings, gate_transcripts

    prep = letters_prep
    model = prep.new_model()
    gate = copy_gate(model, prep.tokenizer, gate_transcripts(prep.test[:2], prep.toolbox), entity_strings(prep.world))
    assert gate["n_name_tokens"] > 0 and gate["n_other_tokens"] > 0 and gate["n_names"] >= 2
    chance = math.log(len(prep.tokenizer))
    assert abs(gate["name_loss"] - chance) < 1.0 and abs(gate["other_loss"] - chance) < 1.0
    assert gate["names_exact"] == 0.0
    assert 0.0 <= gate["names_first"] <= 0.2 and gate["names_exact"] <= gate["names_rest"] <= 1.0


def test_interleave_benchmarks_spreads_a_prefix_over_styles():
    from harness.warmstart import interleave_benchmarks

    tasks = [{"gold": {"template": f"{b}.x"}, "i": i} for b in ("gaia", "xbench", "webwalkerqa") for i in range(3)]
    out = interleave_benchmarks(tasks)
    assert [t["gold"]["template"].split(".")[0] for t in out[:3]] == ["gaia", "webwalkerqa", "xbench"]
    assert sorted(map(id, out)) == sorted(map(id, tasks))


@pytest.mark.slow
def test_killed_sft_resumes_from_its_last_checkpoint(tmp_path, letters_prep):
    from harness.warmstart import sft_train

    prep = letters_prep
    examples = [e for e in prep.examples("planner") if len(e["input_ids"]) <= 1024][:8]
    cfg = load_config(WarmstartConfig, None, [*LETTERS, "max_steps=2", "save_steps=2", "batch_size=2", "gate_every=1"])
    # the copy gate's scores stand in here (this test is about the bookkeeping): the step it was called at
    calls: list[int] = []

    def gate(model):
        calls.append(len(calls))
        return {k: float(len(calls)) for k in ("name_loss", "other_loss", "names_exact", "names_first", "names_rest",
                                               "repeat_loss", "first_loss")}

    first = sft_train(prep.new_model(), prep.tokenizer, examples, cfg, tmp_path, gate=gate)
    assert first["steps"] == 2 and first["resumed_from"] is None
    assert (tmp_path / "trainer" / "checkpoint-2").is_dir()
    # the same build run again with a longer schedule continues from step 2 (a kill after the save) ...
    cfg.max_steps = 4
    second = sft_train(prep.new_model(), prep.tokenizer, examples, cfg, tmp_path, gate=gate)
    assert second["resumed_from"].endswith("checkpoint-2") and second["steps"] == 4
    # ... and reports the copy gate's whole curve, the rows before the resume included
    assert [r["step"] for r in second["gate_log"]] == [1, 2, 3, 4]
    assert [r["name_loss"] for r in second["gate_log"]] == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.slow
def test_restarts_run_the_steps_on_one_cosine_schedule_per_phase(tmp_path, letters_prep, monkeypatch):
    import trl
    from transformers import TrainerCallback

    from harness.warmstart import sft_train

    lrs: dict[int, float] = {}

    class Recording(trl.SFTTrainer):  # the real trainer; it only notes the learning rate after each step
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            outer = self

            class Note(TrainerCallback):
                def on_step_end(self, args, state, control, **kwargs):
                    lrs[state.global_step] = outer.lr_scheduler.get_last_lr()[0]
            self.add_callback(Note())

    monkeypatch.setattr(trl, "SFTTrainer", Recording)
    prep = letters_prep
    examples = [e for e in prep.examples("planner") if len(e["input_ids"]) <= 1024][:8]
    cfg = load_config(WarmstartConfig, None, [*LETTERS, "max_steps=6", "restarts=[3]", "save_steps=1", "batch_size=2"])
    stats = sft_train(prep.new_model(), prep.tokenizer, examples, cfg, tmp_path)
    assert stats["steps"] == 6 and sorted(lrs) == [1, 2, 3, 4, 5, 6]
    peak = cfg.learning_rate
    # phase 1: a cosine that ends at step 3; phase 2 joins the cosine of a 6-step run at step 4
    assert lrs[3] < 1e-3 * peak and lrs[2] > lrs[3]
    assert lrs[4] > 0.1 * peak > lrs[3] and lrs[4] > lrs[5] > lrs[6]
    with pytest.raises(ConfigError, match="restarts=\\[4\\].*multiple of save_steps=3"):
        load_config(WarmstartConfig, None, ["max_steps=6", "restarts=[4]", "save_steps=3"])
    with pytest.raises(ConfigError, match="restarts"):
        load_config(WarmstartConfig, None, ["max_steps=6", "restarts=[6]", "save_steps=3"])


@pytest.mark.slow
def test_shipped_checkpoint_records_hashes_reruns_its_check_and_refuses_a_changed_file(tmp_path, capsys):
    from harness.models import CheckpointError, check_model_ref, verify_checkpoint, warm_start_model_dir

    build, ship = tmp_path / "build", tmp_path / "ship"
    rc = main(["--out", str(build), "--ship", str(ship), *LETTERS, "demo_worlds=4", "joint=true", "max_steps=1",
               "batch_size=2", "eval_tasks=3", "gate_tasks=2", "eval_max_new_tokens=8", "max_length=1024"])
    assert rc == 0
    prov = verify_checkpoint(ship)
    assert prov["agents"] == {"planner": "joint", "sub_agent": "joint", "single_agent": "joint"}
    assert sorted(p.name for p in ship.iterdir()) == ["joint", "provenance.json"]  # one copy of the joint model
    assert "model.safetensors" in {p.split("/")[-1] for p in prov["sha256"]} and prov["bytes"] < 16e6
    assert prov["command"].startswith("python -m harness warmstart") and prov["git"]["commit"]
    assert prov["check"]["greedy"]["n_tasks"] == 3 and prov["check"]["expert"]["success"] > 0
    assert set(prov["check"]["greedy"]["per_benchmark"]) == {"gaia", "webwalkerqa", "xbench"}
    assert prov["copy_gate"]["joint"]["n_name_tokens"] > 0
    for agent in ("planner", "sub_agent", "single_agent"):
        assert warm_start_model_dir(ship, agent) == ship / "joint"
        check_model_ref(str(ship), agent, key=f"models.{agent}")
    model, tok = load_model(str(warm_start_model_dir(ship, "planner")))
    assert model.config.vocab_size == len(tok)
    # the recorded greedy check reruns from the shipped files alone: same tasks, same outcome
    capsys.readouterr()
    assert main(["--recheck", str(ship)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[recheck]")]
    assert len(lines) == 2 and lines[0].split(": ", 1)[1] == lines[1].split(": ", 1)[1], lines
    rerun = recheck(ship)["rerun"]
    assert rerun["n_tasks"] == 3 and rerun["success"] == prov["check"]["greedy"]["success"]
    assert rerun["turns"] == prov["check"]["greedy"]["turns"]
    # a changed weight file is refused, naming the file
    weights = ship / "joint" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors: SHA-256 does not match"):
        warm_start_model_dir(ship, "planner")
    with pytest.raises(Exception, match="models.planner=.*model.safetensors"):
        check_model_ref(str(ship), "planner", key="models.planner")
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    verify_checkpoint(ship)
    # a tokenizer that does not belong to the model (more tokens than its embedding), hashes updated
    tj = ship / "joint" / "tokenizer.json"
    doc = json.loads(tj.read_text())
    doc["added_tokens"].append({**doc["added_tokens"][-1], "id": 100_000, "content": "<extra>"})
    tj.write_text(json.dumps(doc))
    from harness.models import sha256_file

    prov["sha256"]["joint/tokenizer.json"] = sha256_file(tj)
    (ship / "provenance.json").write_text(json.dumps(prov))
    with pytest.raises(CheckpointError, match="tokenizer.json: .* tokens but the model"):
        verify_checkpoint(ship)


@pytest.mark.slow
def test_a_finished_build_ships_without_rebuilding_under_the_command_that_built_it(tmp_path, capsys):
    from harness.models import verify_checkpoint

    build, ship = tmp_path / "build", tmp_path / "ship"
    args = [*LETTERS, "demo_worlds=4", "joint=true", "max_steps=1", "batch_size=2", "eval_tasks=2", "gate_tasks=0",
            "eval_max_new_tokens=8", "max_length=1024"]
    assert main(["--out", str(build), *args]) == 0
    built = json.loads((build / "warmstart.json").read_text())
    # another config than the build's is refused, naming the key, and nothing is shipped
    capsys.readouterr()
    assert main(["--out", str(build), "--ship", str(ship), "--from-build", *args, "max_steps=2"]) == 2
    assert '"max_steps": {"recorded": 1, "command": 2}' in capsys.readouterr().err and not ship.exists()
    # the build's own command ships it as it is: nothing rebuilt, its check and stages kept
    assert main(["--out", str(build), "--ship", str(ship), "--from-build", *args]) == 0
    prov = verify_checkpoint(ship)
    assert prov["check"] == built["check"] and prov["stages"] == built["stages"]
    assert prov["shipped_from_build"] == "build" and "config_differences" not in prov
    assert prov["build_git"] == built["git"] and built["git"]["commit"]  # the commit the build ran at
    assert "--from-build" not in prov["command"] and "--out" not in prov["command"] and "max_steps=1" in prov["command"]
    # a difference explained with --note is shipped, the recorded config kept and the difference recorded
    assert main(["--out", str(build), "--ship", str(ship), "--from-build", "--note", "resumed to 2 steps", *args,
                 "max_steps=2"]) == 0
    prov = verify_checkpoint(ship)
    assert prov["note"] == "resumed to 2 steps" and prov["config"]["max_steps"] == 1
    assert prov["config_differences"] == {"max_steps": {"recorded": 1, "command": 2}}
    assert main(["--out", str(tmp_path / "nowhere"), "--ship", str(ship), "--from-build", *args]) == 2
    assert "not a finished warm-start build" in capsys.readouterr().err


def test_recheck_of_a_folder_without_a_recorded_check_names_the_file(tmp_path, capsys):
    (tmp_path / "warmstart.json").write_text(json.dumps({"config": {}, "stages": {}}))
    assert main(["--recheck", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "warmstart.json: no recorded greedy check to rerun" in err and "shipped checkpoint" in err
    with pytest.raises(ConfigError, match="warmstart.json"):
        recheck(tmp_path / "nowhere")


def test_loss_tokens_all_makes_the_prompt_and_observations_targets_too(demos, tokenizer):
    d, _ = demos
    codec = EpisodeTokens(tokenizer, agent_prompt("sub_agent").tools)
    msgs = d.of("sub_agent")[0]
    model_only, every = tokenize_transcript(codec, msgs), tokenize_transcript(codec, msgs, "all")
    assert every["input_ids"] == model_only["input_ids"] == every["labels"]
    assert sum(t != -100 for t in model_only["labels"]) < len(every["labels"]) / 2  # observations dominate


def test_name_pieces_are_the_demonstration_worlds_name_tokens_most_frequent_first(tokenizer):
    from harness.warmstart import entity_strings, name_pieces

    worlds = [generate_world(seed=s, size="tiny") for s in (3, 4)]
    pieces = name_pieces(tokenizer, worlds)
    spelled = [i for w in worlds for t in sorted(entity_strings(w)) for i in tokenizer(t, add_special_tokens=False)["input_ids"]]
    assert set(pieces) == set(spelled) and len(pieces) == len(set(pieces))
    counts = [spelled.count(i) for i in pieces]
    assert counts == sorted(counts, reverse=True)


def test_bad_loss_tokens_is_a_clear_error():
    with pytest.raises(ConfigError, match="loss_tokens='everything': choose model or all"):
        load_config(WarmstartConfig, None, ["loss_tokens=everything"])
    with pytest.raises(ConfigError, match="visit_links orders links .*set visit_focus: true too"):
        load_config(WarmstartConfig, None, ["visit_links=true"])


class _Copier:
    """A stand-in model that copies perfectly: at each position it predicts the token that followed the
    current token's first earlier occurrence (what an induction head does), and is uniform elsewhere."""

    def __init__(self, vocab: int):
        import torch

        self.vocab, self.training = vocab, False
        self._p = torch.nn.Parameter(torch.zeros(1))

    def parameters(self):
        return iter([self._p])

    def eval(self):
        return self

    def __call__(self, input_ids):
        import torch
        from types import SimpleNamespace

        b, n = input_ids.shape
        logits = torch.zeros(b, n, self.vocab)
        for r in range(b):
            row = input_ids[r].tolist()
            for t in range(n):
                if row[t] in row[:t]:
                    logits[r, t, row[row.index(row[t]) + 1]] = 20.0
        return SimpleNamespace(logits=logits)


def test_induction_probe_tells_a_copying_model_from_one_that_cannot(tokenizer):
    from harness.warmstart import entity_strings, induction_probe

    names = entity_strings(generate_world(seed=3, size="tiny"))
    untrained = load_model("tiny")[0]
    flat = induction_probe(untrained, tokenizer, names)
    assert abs(flat["repeat_loss"] - flat["first_loss"]) < 0.5  # no copying mechanism: the repeat is as hard
    copier = induction_probe(_Copier(len(tokenizer)), tokenizer, names)
    assert copier["repeat_loss"] < 0.5 * copier["first_loss"] and copier["repeat_loss"] < 3.0


def test_the_all_alphabet_is_the_name_pieces_then_every_other_demonstration_token(demos, tokenizer):
    from harness.warmstart import transcript_pieces

    d, _ = demos
    first = [tokenizer("Alpha", add_special_tokens=False)["input_ids"][0]]
    pieces = transcript_pieces(tokenizer, d, first)
    assert pieces[0] == first[0] and len(pieces) == len(set(pieces))
    written = {i for a in ("planner", "sub_agent") for m in d.of(a) for msg in m
               for i in tokenizer(msg["content"], add_special_tokens=False)["input_ids"]}
    assert written <= set(pieces) and not set(pieces) & set(tokenizer.all_special_ids)
    digits = tokenizer("2007", add_special_tokens=False)["input_ids"]
    assert set(digits) <= set(pieces)  # values are copied from pages too


def test_copy_examples_put_the_loss_on_the_predictable_repeat_only():
    from harness.warmstart import copy_examples

    for ex in copy_examples(list(range(5, 40)), 20, seed=1):
        ids, labels = ex["input_ids"], ex["labels"]
        half = len(ids) // 2
        assert ids[:half] == ids[half:] and 10 <= half <= 40
        assert labels[: half + 1] == [-100] * (half + 1) and labels[half + 1:] == ids[half + 1:]
    assert copy_examples(list(range(5, 40)), 3, seed=1) == copy_examples(list(range(5, 40)), 3, seed=1)


@pytest.mark.parametrize("arg, message", [("copy_alphabet=digits", "copy_alphabet='digits': choose names or all"),
                                          ("copy_mix=1.5", r"copy_mix=1.5 must be in \[0, 1\)")])
def test_bad_copy_drill_settings_are_clear_errors(arg, message):
    from harness.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(WarmstartConfig, None, [arg])


def test_recovery_demonstrations_show_a_broken_turn_its_error_and_then_the_right_turn(demos, tokenizer):
    import random

    from harness.agents.parsing import FormatError
    from harness.protocol import render_error
    from harness.rollout import no_result_text
    from harness.warmstart import with_recovery

    d, _ = demos
    rng = random.Random(0)
    n_broken = n_retries = 0
    for agent in ("planner", "sub_agent", "single_agent"):
        codec = EpisodeTokens(tokenizer, agent_prompt(agent).tools)
        for msgs in d.of(agent):
            out = with_recovery(msgs, agent, 0.9, rng)
            # without the inserted pairs (a broken turn and its error; a delegation and its failed result) the
            # transcript is unchanged
            inserted = {j for i, m in enumerate(out[:-1]) if m.get("loss") is False or
                        out[i + 1]["content"] == no_result_text("max_turns") for j in (i, i + 1)}
            assert [m for i, m in enumerate(out) if i not in inserted] == msgs
            n_retries += sum(m["content"] == no_result_text("max_turns") for m in out)
            for i, m in enumerate(out):
                if m.get("loss") is False:
                    n_broken += 1
                    parsed = parse_turn(m["content"], agent_prompt(agent).allowed_tools)
                    assert isinstance(parsed, FormatError)  # what a rollout would reject ...
                    assert out[i + 1] == {"role": "tool", "content": render_error(f"format error: {parsed.reason}")}
                    assert out[i + 2]["role"] == "assistant" and out[i + 2].get("loss", True)  # ... then the fix
            # the broken turns are context only: the targets are exactly the demonstrated turns' tokens
            ex = tokenize_transcript(codec, out)
            targets = [t for t in ex["labels"] if t != -100]
            want = [t for m in out[2:] if m["role"] == "assistant" and m.get("loss", True)
                    for t in codec.assistant_ids(m["content"])]
            assert targets == want
    assert n_broken > 10 and n_retries > 3


def test_demonstration_worlds_together_cover_every_template():
    # 6 tasks per style and world: without rotating the round robin, the first templates in name order took every
    # place in every world, and the check's person, product and later site questions had none (docs/training.md)
    from harness.warmstart import demo_world_tasks

    cfg = load_config(WarmstartConfig, None, ["world_size=tiny", "world_demos=false", "demo_worlds=8",
                                               "demo_world_tasks=6", "n_test_tasks=6"])
    world = generate_world(seed=0, size="tiny")
    seen: dict[str, int] = {}
    for _, tasks in demo_world_tasks(cfg, held_out=[], world=world):
        for t in tasks:
            seen[t["gold"]["template"]] = seen.get(t["gold"]["template"], 0) + 1
    every = generate_tasks(world, TaskConfig(n_train=1000, n_test=1000, verify=False))
    for style in ("gaia", "webwalkerqa"):
        templates = {t["gold"]["template"] for split in ("train", "test") for t in every.tasks[(style, split)]}
        missing = sorted(templates - set(seen))
        assert len(missing) <= len(templates) // 10, (style, missing)


def test_visit_focus_reaches_the_demonstrations():
    # tools.visit_focus (docs/tools.md, "The goal-guided visit"): the demonstrations' toolbox puts the row the
    # expert's goal asks for under the page's title, so the sub-agent learns to answer from that line
    from harness.warmstart import demo_world_tasks

    world = generate_world(seed=0, size="tiny")
    from_top = {}
    for focus in (False, True):
        cfg = load_config(WarmstartConfig, None, ["world_size=tiny", "world_demos=false", "demo_worlds=1",
                                                   "demo_world_tasks=6", "n_test_tasks=6", f"visit_focus={focus}"])
        ((toolbox, tasks),) = list(demo_world_tasks(cfg, held_out=[], world=world))
        assert toolbox.focus is focus
        demos = expert_demonstrations(tasks, toolbox, noise=0.0, seed=0)
        from_top[focus] = 0
        for msgs in demos.sub_agent:
            page, answer = msgs[-2]["content"], msgs[-1]["content"]
            if msgs[-2]["role"] == "tool" and page.startswith("# "):
                value = answer.removeprefix("<answer>").removesuffix("</answer>")
                from_top[focus] += value in page.split("\n")[1]
    assert from_top[True] >= 10 and from_top[True] > 2 * from_top[False], from_top
