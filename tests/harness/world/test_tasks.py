"""Local tasks in the GAIA / WebWalkerQA / XBench schemas (docs/world.md, harness.world.tasks)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from harness.tools.html_text import html_to_text
from harness.world.generator import RELATIONS, WorldConfig, generate_world
from harness.world.tasks import (
    BENCHMARKS, GAIA_FIELDS, GAIA_META, WEBWALKER_INFO, TaskConfig, TaskFileError, generate_tasks, load_tasks,
    rebase, task_prompt, write_tasks,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")


@pytest.fixture(scope="module")
def world():
    return generate_world(WorldConfig(seed=21, size="small"))


@pytest.fixture(scope="module")
def taskset(world):
    return generate_tasks(world, TaskConfig(n_train=60, n_test=25))


def test_all_benchmarks_and_splits_present(taskset):
    for b in BENCHMARKS:
        assert len(taskset.tasks[(b, "train")]) >= 20, b
        assert len(taskset.tasks[(b, "test")]) >= 5, b
    assert taskset.rejected == {b: 0 for b in BENCHMARKS}


def test_gaia_schema_matches_the_official_loader(taskset):
    with open(os.path.join(SHARED, "gaia", "synthetic_gaia_validation.jsonl")) as fh:
        ref = json.loads(fh.readline())
    tasks = taskset.tasks[("gaia", "train")] + taskset.tasks[("gaia", "test")]
    levels = set()
    for t in tasks:
        assert set(t) - {"gold"} == set(ref), set(t) ^ set(ref)
        assert set(t["Annotator Metadata"]) == set(ref["Annotator Metadata"]) == set(GAIA_META)
        assert all(isinstance(t[k], str) for k in GAIA_FIELDS[:-1])
        assert all(isinstance(v, str) for v in t["Annotator Metadata"].values())
        hops = len(t["gold"]["subtasks"]) + (1 if t["file_name"] else 0)
        assert t["Level"] == str(min(hops, 3)), (t["Question"], t["Level"])
        assert t["Annotator Metadata"]["Number of steps"] == str(len(t["Annotator Metadata"]["Steps"].split("\n")))
        levels.add(t["Level"])
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", t["task_id"])
    assert levels == {"1", "2", "3"}
    files = [t for t in tasks if t["file_name"]]
    assert files and all(t["file_path"] == f"files/{t['file_name']}" for t in files)
    # answers: names, numbers and lists all occur
    answers = [t["Final answer"] for t in tasks]
    assert any(a.isdigit() for a in answers) and any("," in a for a in answers) and any(" " in a and "," not in a for a in answers)


def test_webwalkerqa_schema_and_difficulty_by_depth(world, taskset):
    with open(os.path.join(SHARED, "webwalkerqa", "webwalkerqa_sample24.jsonl")) as fh:
        ref = json.loads(fh.readline())
    cells = set()
    for t in taskset.tasks[("webwalkerqa", "train")] + taskset.tasks[("webwalkerqa", "test")]:
        assert set(t) - {"gold"} == set(ref) - {"index"}
        assert set(t["info"]) == set(ref["info"]) == set(WEBWALKER_INFO)
        info = t["info"]
        subs = t["gold"]["subtasks"]
        depth = max(world.pages[p].depth for p in t["gold"]["pages"])
        assert info["difficulty_level"] == {1: "easy", 2: "medium"}.get(depth, "hard")
        assert info["type"] == ("single_source" if len(subs) == 1 else "multi_source")
        assert len(info["golden_path"]) == len(subs) and all(g.startswith("root->") for g in info["golden_path"])
        assert t["root_url"].endswith("/index.html") and t["root_url"].startswith("http://world.local/site/")
        for url in info["source_website"]:
            assert world.resolve(url[len("http://world.local"):]).site == world.resolve(t["root_url"][len("http://world.local"):]).site
        cells.add((info["type"], info["difficulty_level"]))
    assert {("single_source", d) for d in ("easy", "medium", "hard")} <= cells
    assert {("multi_source", d) for d in ("easy", "medium", "hard")} <= cells


def test_xbench_schema_and_unique_answer(world, taskset):
    people = world.of_kind("person")
    for t in taskset.tasks[("xbench", "train")] + taskset.tasks[("xbench", "test")]:
        assert isinstance(t["id"], int) and isinstance(t["prompt"], str) and isinstance(t["answer"], str)
        m = re.match(r"Which person born in (\w+) in the (\d{4})s works for an? (.+?) company(?: as an? (.+?))?\?", t["prompt"])
        assert m, t["prompt"]
        city, decade, industry, role = m.group(1), int(m.group(2)), m.group(3), m.group(4)
        match = [p.name for p in people
                 if world.entities[p.attrs["birth_city"]].name == city and decade <= p.attrs["birth_year"] < decade + 10
                 and world.entities[p.attrs["employer"]].attrs["industry"] == industry
                 and (role is None or p.attrs["role"] == role)]
        assert match == [t["answer"]]
    ids = [t["id"] for k in ("train", "test") for t in taskset.tasks[("xbench", k)]]
    assert len(ids) == len(set(ids))


def test_gold_paths_state_the_gold_facts(world, taskset):
    for t in taskset.all():
        g = t["gold"]
        assert g["pages"] and g["facts"] and g["subtasks"]
        texts = " ".join(re.sub(r" \[[^\]]*\]", "", html_to_text(world.pages[p].html)) for p in g["pages"])
        for subject, rel, value in g["facts"]:
            assert subject in texts
            if rel not in RELATIONS:  # derived counts (list lengths), checked by the expert test
                continue
            for item in value.split(", "):
                assert item in texts or f"{int(item):,}" in texts, (t.get("gold")["template"], subject, value)


def test_train_and_test_share_no_answer_entity(taskset):
    for b in BENCHMARKS:
        train = {e for t in taskset.tasks[(b, "train")] for e in t["gold"]["answer_entities"]}
        test = {e for t in taskset.tasks[(b, "test")] for e in t["gold"]["answer_entities"]}
        assert train and test and not train & test
    train_all = {e for t in taskset.all() if t["gold"]["split"] == "train" for e in t["gold"]["answer_entities"]}
    test_all = {e for t in taskset.all() if t["gold"]["split"] == "test" for e in t["gold"]["answer_entities"]}
    assert not train_all & test_all


def test_generation_is_deterministic(world, taskset):
    again = generate_tasks(world, TaskConfig(n_train=60, n_test=25))
    assert json.dumps(again.all()) == json.dumps(taskset.all())


def test_write_and_load_round_trip(taskset, tmp_path):
    paths = write_tasks(taskset, str(tmp_path))
    for b in BENCHMARKS:
        for split in ("train", "test"):
            loaded = load_tasks(str(tmp_path / b / f"{split}.jsonl"))
            assert loaded == taskset.tasks[(b, split)]
    att = [t for t in taskset.tasks[("gaia", "train")] if t["file_name"]][0]
    csv_path = tmp_path / "gaia" / att["file_path"]
    assert str(csv_path) in paths and csv_path.read_text() == att["gold"]["attachment"]["content"]
    # the prompt can read the attachment from disk when the gold copy is absent
    bare = json.loads(json.dumps(att))
    del bare["gold"]["attachment"]["content"]
    assert task_prompt(bare, str(tmp_path / "gaia")) == task_prompt(att)
    assert "product,units" in task_prompt(att)


@pytest.mark.parametrize("line, needle", [
    ('{"question": "q", "answer": "a"', "invalid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"question": "q", "answer": "a", "root_url": "http://x/", "info": {"domain": "d"}}', "'info'.'lang'"),
    ('{"task_id": "x", "Question": "q"}', "missing field 'Level'"),
    ('{"foo": 1}', "unknown task schema"),
])
def test_load_tasks_names_file_and_line(tmp_path, taskset, line, needle):
    good = json.dumps(taskset.tasks[("xbench", "train")][0])
    path = tmp_path / "broken.jsonl"
    path.write_text(good + "\n\n" + line + "\n")
    with pytest.raises(TaskFileError) as info:
        load_tasks(str(path))
    assert f"{path}:3:" in str(info.value) and needle in str(info.value)


def test_rebase_moves_every_url(taskset):
    t = next(t for t in taskset.tasks[("webwalkerqa", "train")] if t["info"]["type"] == "multi_source")
    r = rebase(t, "http://127.0.0.1:9999/")
    assert r["root_url"].startswith("http://127.0.0.1:9999/site/")
    assert all(u.startswith("http://127.0.0.1:9999/") for u in r["info"]["source_website"])
    assert all("http://127.0.0.1:9999/site/" in s["task"] for s in r["gold"]["subtasks"])
    assert "world.local" not in json.dumps(r) and t["root_url"].startswith("http://world.local/")


def test_prompts_by_schema(taskset):
    ww = taskset.tasks[("webwalkerqa", "train")][0]
    assert task_prompt(ww).endswith(f"Start from this website: {ww['root_url']}")
    xb = taskset.tasks[("xbench", "train")][0]
    assert task_prompt(xb) == xb["prompt"]


@pytest.mark.parametrize("kwargs, field", [(dict(n_train=-1), "n_train"), (dict(test_fraction=1.0), "test_fraction"),
                                           (dict(base_url="world.local"), "base_url")])
def test_invalid_task_config(kwargs, field):
    with pytest.raises(ValueError, match=f"TaskConfig.{field}"):
        TaskConfig(**kwargs)


def test_cli_tasks_writes_jsonl(tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness", "world", "tasks", "--seed", "3", "--size", "tiny",
                          "--out", str(tmp_path), "--n", "8"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for b in BENCHMARKS:
        for split in ("train", "test"):
            tasks = load_tasks(str(tmp_path / b / f"{split}.jsonl"))
            assert 1 <= len(tasks) <= 8
    assert "gaia" in out.stdout and "expert rejected" in out.stdout


def test_task_generation_benchmark(world, benchmark):
    ts = benchmark.pedantic(generate_tasks, args=(world, TaskConfig(n_train=50, n_test=15)), rounds=1, iterations=1)
    assert sum(len(v) for v in ts.tasks.values()) > 100


def test_select_tasks_by_hops_and_template(taskset):
    from harness.world.tasks import select_tasks

    tasks = taskset.all()
    one_hop = select_tasks(tasks, max_hops=1)
    assert one_hop and all(len(t["gold"]["subtasks"]) <= 1 for t in one_hop)
    people = select_tasks(tasks, templates=["gaia.person.*"])
    assert people and all(t["gold"]["template"].startswith("gaia.person.") for t in people)
    assert select_tasks(tasks) == tasks and select_tasks(tasks, templates=[]) == []
    both = select_tasks(tasks, max_hops=1, templates=["gaia.person.*", "xbench.*"])
    assert [t for t in one_hop if t in people] == [t for t in both if t["gold"]["template"].startswith("gaia")]


def test_template_start_rotates_the_round_robin_over_templates():
    w = generate_world(WorldConfig(seed=4, size="tiny"))
    base = generate_tasks(w, TaskConfig(n_train=3, n_test=1, verify=False))
    assert generate_tasks(w, TaskConfig(n_train=3, n_test=1, verify=False, template_start=0)).tasks == base.tasks
    everything = generate_tasks(w, TaskConfig(n_train=1000, n_test=1, verify=False))
    names = sorted({t["gold"]["template"] for t in everything.tasks[("gaia", "train")]})
    first = [t["gold"]["template"] for t in base.tasks[("gaia", "train")]]
    assert first == names[:3]  # few tasks: the first templates in name order take every place
    for k in (5, len(names) + 5):  # modulo the number of templates
        later = generate_tasks(w, TaskConfig(n_train=3, n_test=1, verify=False, template_start=k))
        assert [t["gold"]["template"] for t in later.tasks[("gaia", "train")]] == names[5:8]
    with pytest.raises(ValueError, match="template_start: expected an int >= 0"):
        TaskConfig(template_start=-1)
