"""Scripted expert planner / sub-agent (docs/architecture.md §The agent system, docs/world.md, docs/models.md; harness.world.expert)."""

from __future__ import annotations

import collections
import json

import pytest

from harness.agents.parsing import FinalAnswer, ToolCall, parse_turn
from harness.world.expert import (
    ExpertConfig, ExpertPlanner, ExpertSubAgent, delegated_subtask_gold, extract_fact, run_expert_episode,
)
from harness.world.generator import WorldConfig, generate_world
from harness.world.judge import expert_judge
from harness.world.subtasks import parse_subtask
from harness.world.tasks import BENCHMARKS, TaskConfig, generate_tasks
from harness.world.toolbox import WorldToolbox


@pytest.fixture(scope="module")
def world():
    return generate_world(WorldConfig(seed=33, size="small"))


@pytest.fixture(scope="module")
def toolbox(world):
    return WorldToolbox(world)


@pytest.fixture(scope="module")
def tasks(world):
    # verify=False: the expert must solve them here on its own, not because generation filtered them
    ts = generate_tasks(world, TaskConfig(n_train=120, n_test=40, verify=False))
    return ts.all()


def test_solves_every_task_at_noise_zero(tasks, toolbox):
    per_bench = collections.Counter(t["gold"]["benchmark"] for t in tasks)
    assert len(tasks) >= 300 and all(per_bench[b] >= 40 for b in BENCHMARKS), per_bench
    failed = []
    for t in tasks:
        tr = run_expert_episode(t, toolbox, noise=0.0, seed=0)
        if not tr.correct:
            failed.append((t["gold"]["template"], tr.answer, tr.gold_answer))
    assert not failed, failed[:5]


def test_messages_follow_the_protocol(tasks, toolbox):
    for t in tasks[::7]:
        tr = run_expert_episode(t, toolbox, noise=0.3, seed=1)
        for msgs, tools in [(tr.planner, {"delegate"})] + [(s, {"search", "visit"}) for s in tr.sub_calls]:
            assert [m["role"] for m in msgs[:2]] == ["system", "user"]
            roles = [m["role"] for m in msgs[2:]]
            assert roles[-1] == "assistant"
            assert all(r == ("assistant" if i % 2 == 0 else "tool") for i, r in enumerate(roles))
            parsed = [parse_turn(m["content"], tools) for m in msgs if m["role"] == "assistant"]
            assert all(isinstance(p, ToolCall) for p in parsed[:-1]) and isinstance(parsed[-1], FinalAnswer)
        n_delegate = sum(1 for m in tr.planner if m["role"] == "assistant") - 1
        assert n_delegate == len(tr.sub_calls)
        # the planner sees exactly the sub-agent's result text
        results = [m["content"] for m in tr.planner if m["role"] == "tool"]
        assert results == [parse_turn(s[-1]["content"], {"search"}).text for s in tr.sub_calls]


def test_deterministic_given_seed(tasks, toolbox):
    t = tasks[5]
    a = run_expert_episode(t, toolbox, noise=0.4, seed=9).to_dict()
    b = run_expert_episode(t, toolbox, noise=0.4, seed=9).to_dict()
    assert a == b
    many = {json.dumps(run_expert_episode(t, toolbox, noise=0.4, seed=s).to_dict()) for s in range(12)}
    assert len(many) > 1


def test_noise_makes_mistakes_but_not_always(tasks, toolbox):
    acc = {}
    for noise in (0.1, 0.5):
        acc[noise] = sum(run_expert_episode(t, toolbox, noise=noise, seed=2).correct for t in tasks) / len(tasks)
    assert 0.5 < acc[0.1] < 1.0
    assert 0.0 < acc[0.5] < acc[0.1]


def test_systematic_planner_blind_spot_by_template(tasks, toolbox):
    spot = "gaia.person.birth_year"
    cfg = ExpertConfig(template_rates={spot: {"decompose": 1.0}})
    hit = [t for t in tasks if t["gold"]["template"] == spot]
    rest = [t for t in tasks if t["gold"]["template"] != spot][:80]
    assert hit
    assert not any(run_expert_episode(t, toolbox, seed=0, config=cfg).correct for t in hit)
    assert all(run_expert_episode(t, toolbox, seed=0, config=cfg).correct for t in rest)
    # a partial blind spot: usually wrong, sometimes right (what RL can fix, docs/architecture.md §Making the tiny default learn)
    cfg = ExpertConfig(template_rates={spot: {"decompose": 0.7}})
    wins = sum(run_expert_episode(hit[0], toolbox, seed=s, config=cfg).correct for s in range(40))
    assert 3 <= wins <= 25


def test_systematic_sub_agent_blind_spot_by_phrase(tasks, toolbox):
    cfg = ExpertConfig(phrase_rates={"price": {"extract": 1.0}})
    price = [t for t in tasks if any(s.get("phrase") == "price" for s in t["gold"]["subtasks"])]
    other = [t for t in tasks if all(s.get("phrase") != "price" for s in t["gold"]["subtasks"])][:60]
    assert price
    single = [t for t in price if len(t["gold"]["subtasks"]) == 1]
    assert single and not any(run_expert_episode(t, toolbox, config=cfg).correct for t in single)
    assert all(run_expert_episode(t, toolbox, config=cfg).correct for t in other)


def test_sub_agent_reads_only_observations(world, tasks):
    """Feed a toolbox whose pages say something else: the expert must report what it saw."""
    t = next(t for t in tasks if t["gold"]["template"] == "gaia.person.birth_year")
    real = WorldToolbox(world)
    year = t["gold"]["answer"]

    class Lying:
        def call(self, name, arguments):
            return real.call(name, arguments).replace(f"| Born | {year}", "| Born | 1234")

    tr = run_expert_episode(t, Lying(), seed=0)
    assert tr.answer == "1234" and not tr.correct


def test_sub_agent_recovers_from_a_wrong_link(tasks, toolbox):
    cfg = ExpertConfig(rates={"link_pick": 0.35})
    walks = [t for t in tasks if t["gold"]["benchmark"] == "webwalkerqa"][:60]
    results = [run_expert_episode(t, toolbox, seed=4, config=cfg) for t in walks]
    restarted = [r for r in results if any(
        sum(1 for m in s if m["role"] == "assistant" and t["root_url"] in m["content"]) > 1
        for s, t in [(s, t) for s in r.sub_calls for t in walks if t["gold"]["uid"] == r.task_id])]
    assert restarted, "no episode restarted from the home page after a wrong link"
    assert sum(r.correct for r in restarted) >= 1


def test_planner_and_sub_agent_act_turn_by_turn(tasks, toolbox):
    t = next(t for t in tasks if t["gold"]["template"].startswith("gaia.product.maker.ceo"))
    planner = ExpertPlanner(t, ExpertConfig(), seed=0)
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": t["Question"]}]
    first = parse_turn(planner.act(msgs), {"delegate"})
    assert isinstance(first, ToolCall) and first.arguments["task"] == t["gold"]["subtasks"][0]["task"]
    assert planner.act(msgs) == planner.act(list(msgs))  # pure in the messages
    sub = ExpertSubAgent(ExpertConfig(), seed=0)
    sm = [{"role": "system", "content": "s"}, {"role": "user", "content": first.arguments["task"]}]
    step = parse_turn(sub.act(sm), {"search", "visit"})
    assert step == ToolCall("search", {"query": t["gold"]["subtasks"][0]["subject"]})
    sm += [{"role": "assistant", "content": sub.act(sm)}, {"role": "tool", "content": toolbox.call("search", step.arguments)}]
    step = parse_turn(sub.act(sm), {"search", "visit"})
    assert isinstance(step, ToolCall) and step.name == "visit" and step.arguments["url"].endswith(".html")
    sm += [{"role": "assistant", "content": sub.act(sm)}, {"role": "tool", "content": toolbox.call("visit", step.arguments)}]
    result = parse_turn(sub.act(sm), {"search", "visit"})
    assert result == FinalAnswer(t["gold"]["subtasks"][0]["answer"])
    msgs += [{"role": "assistant", "content": planner.act(msgs)}, {"role": "tool", "content": result.text}]
    second = parse_turn(planner.act(msgs), {"delegate"})
    assert second.arguments["task"] == t["gold"]["subtasks"][1]["task"].replace("{r0}", result.text)


def test_unparseable_subtask_gets_an_answer():
    sub = ExpertSubAgent()
    out = sub.act([{"role": "system", "content": ""}, {"role": "user", "content": "Tell me a joke."}])
    assert isinstance(parse_turn(out, {"search", "visit"}), FinalAnswer)


def test_extract_fact_rows_and_prose():
    text = "# X\n| Born | 1983\n| Birthplace | Brisca [http://h/wiki/brisca.html]\n| Population | 1,234,500"
    assert extract_fact(text, "birth year") == "1983"
    assert extract_fact(text, "birthplace") == "Brisca"
    assert extract_fact(text, "population") == "1234500"
    assert extract_fact(text, "employer") is None
    assert extract_fact("# A\nX, organised by Y, was held in Z in 2001. It drew 4,560 visitors.", "attendance") == "4560"


@pytest.mark.parametrize("kwargs, needle", [
    (dict(noise=1.5), "ExpertConfig.noise"), (dict(rates={"typo": 0.1}), "unknown decision 'typo'"),
    (dict(template_rates={"gaia.x": {"final": -0.1}}), "template_rates['gaia.x']['final']"),
    (dict(phrase_rates={"price": {"nope": 0.1}}), "phrase_rates['price']"), (dict(max_visits=0), "max_visits"),
    (dict(task_sentence="yes"), "ExpertConfig.task_sentence"),
])
def test_invalid_expert_config(kwargs, needle):
    with pytest.raises(ValueError) as info:
        ExpertConfig(**kwargs)
    assert needle in str(info.value)


def test_noise_zero_sub_results_satisfy_the_judge(tasks, toolbox):
    for t in tasks[::5]:
        tr = run_expert_episode(t, toolbox, seed=0)
        for gold, sm in zip(t["gold"]["subtasks"], tr.sub_calls):
            result = parse_turn(sm[-1]["content"], {"search"}).text
            assert expert_judge(gold, result) == 1.0, (gold["task"], result)


def test_expert_episode_benchmark(tasks, toolbox, benchmark):
    sample = tasks[::10]
    out = benchmark.pedantic(lambda: [run_expert_episode(t, toolbox) for t in sample], rounds=1, iterations=1)
    assert all(tr.correct for tr in out)


def test_single_agent_transcripts(tasks, toolbox):
    from harness.world.expert import run_expert_single_episode

    for t in tasks[::6]:
        tr = run_expert_single_episode(t, toolbox, seed=0)
        assert tr.correct and tr.sub_calls == []
        roles = [m["role"] for m in tr.planner[2:]]
        assert all(r == ("assistant" if i % 2 == 0 else "tool") for i, r in enumerate(roles)) and roles[-1] == "assistant"
        parsed = [parse_turn(m["content"], {"search", "visit"}) for m in tr.planner if m["role"] == "assistant"]
        assert all(isinstance(p, ToolCall) for p in parsed[:-1]) and isinstance(parsed[-1], FinalAnswer)
        multi = run_expert_episode(t, toolbox, seed=0)
        n_tool_turns = sum(1 for s in multi.sub_calls for m in s if m["role"] == "tool")
        assert len(parsed) - 1 == n_tool_turns


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_micro_worlds_are_fully_solvable(seed):
    """the recipe of docs/architecture.md §Making the tiny default learn: many fresh small worlds (~44 pages) so nothing can be memorised."""
    w = generate_world(WorldConfig(seed=seed, size="tiny", n_orgs=2, n_people=6, n_cities=2, n_products=2,
                                   n_events=1, n_countries=1))
    ts = generate_tasks(w, TaskConfig(n_train=30, n_test=10, verify=False))
    tb = WorldToolbox(w)
    assert len(ts.all()) >= 20
    assert all(run_expert_episode(t, tb).correct for t in ts.all())


def test_the_sub_agent_can_search_and_visit_with_the_task_sentence(tasks, toolbox):
    # ExpertConfig(task_sentence=True): a lookup's first search and every visit goal are the task's own sentence (a
    # copy that starts at its first word; docs/training.md), in a site walk the sentence from "find" on (its URL is
    # the call's other argument), and search still finds the entity's page first: the expert solves every task
    config = ExpertConfig(task_sentence=True)
    queries, goals = [], []
    for t in tasks[::3]:
        tr = run_expert_episode(t, toolbox, noise=0.0, seed=0, config=config)
        assert tr.correct, (t["gold"]["template"], tr.answer, tr.gold_answer)
        for call in tr.sub_calls:
            user = next(m["content"] for m in call if m["role"] == "user").split("\n")[0]
            for m in call:
                turn = parse_turn(m["content"], {"search", "visit"}) if m["role"] == "assistant" else None
                if isinstance(turn, ToolCall) and turn.name == "search" and m is call[2]:
                    queries.append((user, turn.arguments["query"]))
                if isinstance(turn, ToolCall) and turn.name == "visit" and not user.startswith("Which of"):
                    goals.append((user, turn.arguments["goal"]))
    lookups = [(task, q) for task, q in queries if task.startswith(("Find the ", "List the people born in "))]
    assert len(lookups) > 50 and all(q == task for task, q in lookups), lookups[:3]
    want = {task: task[task.index("find "):] if task.startswith("On the website ") else task for task, _ in goals}
    assert len(goals) > 100 and all(g == want[task] for task, g in goals), [x for x in goals if want[x[0]] != x[1]][:3]
    walks = [g for task, g in goals if task.startswith("On the website ")]
    assert len(walks) > 20 and all(g.startswith("find the ") and "http" not in g for g in walks), walks[:3]
    assert ExpertConfig(task_sentence=True, noise=0.3).noise_free() == ExpertConfig(task_sentence=True)


def test_the_planner_can_delegate_a_one_hop_question_in_its_own_words(tasks, toolbox):
    # ExpertConfig(delegate_question=True): a task whose only subtask is the lookup or site walk its question asks
    # for is delegated as its own prompt (the question, a site's with its start line), which the subtask language
    # parses back to the same subtask; every other task as before; the noise-free expert still solves every task;
    # the sub-agent's search and visit goals are the question (a copy of its first line)
    config = ExpertConfig(task_sentence=True, delegate_question=True)
    asked = collections.Counter()
    for t in tasks[::2]:
        tr = run_expert_episode(t, toolbox, noise=0.0, seed=0, config=config)
        assert tr.correct, (t["gold"]["template"], tr.answer, tr.gold_answer)
        first = parse_turn(tr.planner[2]["content"], {"delegate"}).arguments["task"]
        subs = t["gold"]["subtasks"]
        before = run_expert_episode(t, toolbox, noise=0.0, seed=0, config=ExpertConfig(task_sentence=True))
        old = parse_turn(before.planner[2]["content"], {"delegate"}).arguments["task"]
        if first != old:
            asked[subs[0]["kind"]] += 1
            assert len(subs) == 1 and tr.planner[1]["content"].removeprefix("Question:").strip() == first, first
            assert parse_subtask(first) == parse_subtask(old) is not None
            question = first.split("\n")[0]
            turns = [parse_turn(m["content"], {"search", "visit"}) for m in tr.sub_calls[0] if m["role"] == "assistant"]
            goals = [x.arguments["goal"] for x in turns if isinstance(x, ToolCall) and x.name == "visit"]
            assert goals and all(g == question for g in goals), (question, goals)
            if subs[0]["kind"] == "lookup":
                assert turns[0].arguments["query"] == question
        else:
            asked["as before"] += 1
            assert tr.planner == before.planner
            assert len(subs) > 1 or t["gold"]["template"] == "gaia.list.products", t["gold"]["template"]
    assert min(asked["lookup"], asked["walk"], asked["as before"]) > 10, asked
    assert config.noise_free() == config
    with pytest.raises(ValueError, match="delegate_question"):
        ExpertConfig(delegate_question="yes")


def test_the_planner_can_delegate_a_chain_in_the_question_words(tasks, toolbox):
    # ExpertConfig(delegate_spans=True): every hop of a chain question is delegated in the question's words,
    # innermost first, with earlier results in place of their noun phrase; the first hop is a span of the question,
    # the last the question's frame about the last result; each hop parses to the subtask the expert delegated
    # before; other tasks as before; the noise-free expert still solves every task
    from harness.world.subtasks import cap_first

    base = ExpertConfig(task_sentence=True, delegate_question=True)
    config = ExpertConfig(task_sentence=True, delegate_question=True, delegate_spans=True)
    chains = collections.Counter()
    for t in tasks[::2]:
        tr = run_expert_episode(t, toolbox, noise=0.0, seed=0, config=config)
        assert tr.correct, (t["gold"]["template"], tr.answer, tr.gold_answer)
        before = run_expert_episode(t, toolbox, noise=0.0, seed=0, config=base)
        hops = [parse_turn(m["content"], {"delegate"}).arguments["task"] for m in tr.planner[2::2][:-1]]
        old = [parse_turn(m["content"], {"delegate"}).arguments["task"] for m in before.planner[2::2][:-1]]
        assert [parse_subtask(h) for h in hops] == [parse_subtask(h) for h in old]
        question = tr.planner[1]["content"].removeprefix("Question:").strip()
        if hops != old:
            chains[len(hops)] += 1
            assert hops[0].startswith("Find ") and hops[0][5:-1] in question, (hops[0], question)
            frame = parse_subtask(question)
            assert hops[-1] == cap_first(question.replace(frame.name, parse_subtask(hops[-1]).name)), hops[-1]
        else:
            assert tr.planner == before.planner
            assert parse_subtask(question) is None or len(hops) == 1, question
    assert chains[2] > 10 and chains[3] > 3, chains
    assert config.noise_free() == config
    with pytest.raises(ValueError, match="delegate_spans"):
        ExpertConfig(delegate_spans=1)


def test_with_the_link_order_every_walk_link_the_expert_follows_comes_first(world, tasks):
    # tools.visit_links (docs/tools.md): on every site page where the expert picks a menu item or a listed link,
    # the goal-guided visit puts that link first in its menu line or list (on a small world, question and phrase
    # goals alike), so a sub-agent that follows the first link walks as the expert does; the expert solves every
    # task through these observations
    from harness.tools.focus import _list_link, _menu_items

    box = WorldToolbox(world, k=3, snippets=False, focus=True, links=True)
    config = ExpertConfig(task_sentence=True, delegate_question=True)
    first = collections.Counter()
    for t in tasks[::2]:
        tr = run_expert_episode(t, box, noise=0.0, seed=0, config=config)
        assert tr.correct, (t["gold"]["template"], tr.answer, tr.gold_answer)
        for call in tr.sub_calls:
            for page, turn in zip(call[3::2], call[4::2]):
                call_ = parse_turn(turn["content"], {"search", "visit"})
                if not isinstance(call_, ToolCall) or call_.name != "visit":
                    continue
                lines = page["content"].split("\n")
                for i, line in enumerate(lines):
                    menu = _menu_items(line)
                    if menu and call_.arguments["url"] in [u for _, u in menu]:
                        first[("menu", menu[0][1] == call_.arguments["url"])] += 1
                    link = _list_link(line)
                    if link and link[1] == call_.arguments["url"]:
                        top = i
                        while top > 0 and _list_link(lines[top - 1]):
                            top -= 1
                        first[("list", top == i)] += 1
    assert first[("menu", True)] > 30 and first[("list", True)] > 30, first
    assert first[("menu", False)] == first[("list", False)] == 0, first


def test_delegated_subtask_gold_answers_the_subtask_as_written(world, tasks, toolbox):
    # rewards.sub_expert_reference: delegated (docs/paper.md, Rewards): the gold of a delegated text is what the
    # noise-free expert finds for it. For the gold path's own first subtask it is the gold path's fact (every kind:
    # lookup, walk, natives, filter); for a wrongly delegated relation it is that relation's fact, which the gold
    # path's judge scores 0; a text outside the subtask language or about no entity of the world gives None.
    kinds = collections.Counter()
    for t in tasks[::3]:
        gold = t["gold"]["subtasks"][0]
        if "{" in gold["task"]:  # an attachment's placeholder, filled in by the planner
            continue
        own = delegated_subtask_gold(gold["task"], toolbox)
        assert own is not None and own["kind"] == gold["kind"], (gold["task"], own)
        assert expert_judge(gold, own["answer"]) == 1.0, (gold["task"], own["answer"], gold["answer"])
        kinds[gold["kind"]] += 1
    assert min(kinds["lookup"], kinds["walk"]) > 5 and kinds["natives"] > 0, kinds
    person = next(e for e in world.entities.values() if e.kind == "person")
    asked = delegated_subtask_gold(f"In which city was {person.name} born?", toolbox)  # a one-hop question
    wrong = delegated_subtask_gold(f"Find the birth year of {person.name}.", toolbox)  # the relation a planner mixed up
    assert asked is not None and wrong is not None and asked["answer"] != wrong["answer"]
    assert expert_judge(wrong, f"{person.name} was born in {wrong['answer']}.") == 1.0
    assert expert_judge(asked, wrong["answer"]) == 0.0
    assert delegated_subtask_gold("Tell me a story.", toolbox) is None
    assert delegated_subtask_gold("Find the birth year of Nobody Atall.", toolbox) is None
