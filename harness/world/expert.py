"""Scripted expert planner and sub-agent for the offline world (docs/architecture.md §The agent system, docs/world.md, docs/models.md).

Both are turn-by-turn policies over the message format of :mod:`harness.protocol`:
``act(messages) -> str`` reads the conversation so far (``system``/``user``/``assistant``/
``tool`` dicts) and returns the next assistant message (one ``<tool_call>`` or one
``<answer>``). They act **only through tools**: the sub-agent sees the world only in
``search``/``visit`` observations; the planner sees only the question and the sub-agent's
result texts, plus the task's structured gold decomposition (subtasks, with the values it
learns substituted from observations).

* :class:`ExpertPlanner` delegates the gold subtasks in order (filling ``{r0}``..., ``{cands}``
  and ``{f}`` from earlier results and the attachment), then combines the results
  (``last``, ``sub``, ``sum``, ``pick``, ``sorted_list``) into the final answer.
* :class:`ExpertSubAgent` parses the delegated text (:func:`harness.world.subtasks.parse_subtask`)
  and follows rules: search the name, open the exact-title hit, read the labelled row; on a
  site, walk the menu (``About``; ``Team`` -> person; ``Products`` -> product ->
  ``Specifications`` -> ``Support``; ``News`` -> ``Older news``* -> article); when a page
  lacks what it needs it tries the next hit or restarts from the site's home page.

Noise (:class:`ExpertConfig`): each decision of a given type goes wrong with a probability
looked up most-specific first -- per template (planner) or per subtask phrase/kind
(sub-agent), then per decision type, then ``noise``. So a systematic blind spot is e.g.
``ExpertConfig(template_rates={"gaia.chain2": {"decompose": 0.8}})``. Decision types:
planner ``decompose`` (wrong relation in a subtask; xbench: skips the remaining filters),
``final`` (answers an intermediate result / the other candidate / off by one);
sub-agent ``search_pick`` (opens a wrong hit), ``link_pick`` (follows a wrong link),
``extract`` (reads the neighbouring row, drops a list item, flips a filter verdict).
Randomness: each turn draws from ``random.Random(f"{seed}:{role}:{turn}")``, so ``act`` is a
pure function of (messages, seed) and reruns are identical.

Deliberate deviations: the system prompts here are minimal placeholders (the agents' real
prompts live in ``harness.agents``; :func:`run_expert_episode` accepts replacements); the
planner never sends a ``context`` argument (subtask texts are self-contained).
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
from dataclasses import asdict, dataclass
from typing import Any

from harness.config import help_field
from harness.protocol import (
    ANSWER_CLOSE, ANSWER_OPEN, TOOL_CALL_CLOSE, TOOL_CALL_OPEN, Toolbox, format_answer, format_tool_call,
)
from harness.world.judge import normalise
from harness.world.render import NEWS_OLDER
from harness.world.schemas import ATTACHMENT_MARKER, task_id, task_prompt
from harness.world.subtasks import LOOKUP_NP, LOOKUP_QUESTION, PHRASES, ParsedSubtask, cap_first, parse_subtask

PLANNER_SYSTEM = (
    "You are a research planner. Break the question into subtasks and give each to the sub-agent "
    "with the delegate tool, one call per turn. When you know the answer, reply <answer>...</answer>."
)
SUB_AGENT_SYSTEM = (
    "You are a web research sub-agent. Use search and visit, one call per turn, to solve the task. "
    "Reply <answer>...</answer> with only the requested fact."
)
PLANNER_DECISIONS = ("decompose", "final")
SUB_DECISIONS = ("search_pick", "link_pick", "extract")
SINGLE_AGENT_SYSTEM = (
    "You are a web research agent. Use search and visit, one call per turn, to answer the question. "
    "When you know the answer, reply <answer>...</answer>."
)
NOT_FOUND = "Not found"

# Phrases that live on the same page type (a decomposition error swaps within a group).
_GROUPS = (
    ("birth year", "birthplace", "employer", "occupation"),
    ("industry", "founding year", "headquarters city", "chief executive", "number of employees"),
    ("country", "population"),
    ("maker", "category", "launch year"),
    ("host city", "year", "organiser"),
    ("joining year", "role"),
    ("price", "warranty"),
)
# Site walks: the links to follow from the home page ("{name}": the entity; ("news",) the news hunt).
WALK_PLAN: dict[str, tuple[str, ...]] = {
    "joining year": ("Team", "{name}"), "role": ("Team", "{name}"),
    "price": ("Products", "{name}", "Specifications"),
    "warranty": ("Products", "{name}", "Specifications", "Support"),
    "launch year": ("Products", "{name}"), "category": ("Products", "{name}"),
    "founding year": ("About",), "headquarters city": ("About",), "industry": ("About",),
    "chief executive": ("About",), "number of employees": ("About",),
    "attendance": ("News", "*{name}"),  # "*": a link whose text contains the name; else "Older news"
    "number of team members": ("Team",), "number of products": ("Products",),
}
_HIT = re.compile(r"^\[(\d+)\] (.*)\nURL: (\S+)", re.M)
_LINK = re.compile(r"([^\[\]\n|]+?) \[(\S+?)\]")
_MARK = re.compile(r" \[[^\]\s]*\]")
_ROW = re.compile(r"^\| (.+?) \| (.+)$", re.M)


@dataclass
class ExpertConfig:
    """Error model of the scripted expert (all probabilities in [0, 1])."""

    noise: float = help_field(0.0, "Default probability that any one decision goes wrong.")
    rates: dict[str, float] = help_field(
        {}, "Per decision type (``decompose``, ``final``, ``search_pick``, ``link_pick``, ``extract``); overrides "
        "``noise``.")
    template_rates: dict[str, dict[str, float]] = help_field(
        {}, "Planner blind spots: task template (gold ``template``) -> decision type -> probability.")
    phrase_rates: dict[str, dict[str, float]] = help_field(
        {}, "Sub-agent blind spots: subtask phrase (e.g. ``joining year``) or kind (``natives``, ``filter``) -> "
        "decision -> probability.")
    max_visits: int = help_field(14, "The sub-agent gives up (answers ``Not found``) after this many ``visit`` calls.")
    task_sentence: bool = help_field(
        False, "The sub-agent searches (in a lookup) and states every visit goal with the task's own sentence (search "
        "answers it with the named entity's page first; the goal-guided visit matches its words) instead of the name "
        "and a 'relation of name' phrase: each is then a copy that starts at the task's first word, which a tiny "
        "model's induction heads can make, where the first token of a name or relation cannot be found by copying "
        "(docs/training.md, \"Build b5\"). In a site walk the goal is the sentence from its word 'find' on (the "
        "site's URL is already the visit's other argument).")
    delegate_question: bool = help_field(
        False, "The planner delegates a one-hop question (a task with one subtask, asked in a form the subtask "
        "language parses back to that subtask) in the question's own words, a site's with its start line, instead "
        "of rewording it as 'Find the <relation> of <name>.' or 'On the website <root>, find ...': its delegation is "
        "then a copy of its own prompt, and reading the relation and the entity off the question is left to the "
        "sub-agent (docs/training.md, \"Build b7\").")
    delegate_spans: bool = help_field(
        False, "The planner delegates each hop of a chain question (\"In which country is the city where X was "
        "born?\") in the question's own words, innermost first, with what earlier hops found in place of their noun "
        "phrase: 'Find the city where X was born.' (a span of the question), then 'In which country is <city>?' "
        "(the question's frame), instead of 'Find the birthplace of X.' and 'Find the country of <city>.': the "
        "entity's name is then copied after the same words as in the question, and no relation is chosen by "
        "meaning (docs/world.md, the noun-phrase subtask form; not yet in a shipped warm start).")

    def __post_init__(self) -> None:
        decisions = set(PLANNER_DECISIONS + SUB_DECISIONS)

        def check(where: str, p: Any) -> None:
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
                raise ValueError(f"ExpertConfig.{where}: expected a probability in [0, 1], got {p!r}")

        check("noise", self.noise)
        for d, p in self.rates.items():
            if d not in decisions:
                raise ValueError(f"ExpertConfig.rates: unknown decision {d!r}; expected one of {sorted(decisions)}")
            check(f"rates[{d!r}]", p)
        for name, table in (("template_rates", self.template_rates), ("phrase_rates", self.phrase_rates)):
            for key, sub in table.items():
                for d, p in sub.items():
                    if d not in decisions:
                        raise ValueError(f"ExpertConfig.{name}[{key!r}]: unknown decision {d!r}; expected one of {sorted(decisions)}")
                    check(f"{name}[{key!r}][{d!r}]", p)
        if self.max_visits < 1:
            raise ValueError(f"ExpertConfig.max_visits: expected >= 1, got {self.max_visits}")
        for name in ("task_sentence", "delegate_question", "delegate_spans"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"ExpertConfig.{name}: expected true or false, got {getattr(self, name)!r}")

    def noise_free(self) -> "ExpertConfig":
        """The same expert (its ``task_sentence``, ``delegate_question``, ``delegate_spans`` and ``max_visits``)
        without any error: every rate 0."""
        return ExpertConfig(noise=0.0, max_visits=self.max_visits, task_sentence=self.task_sentence,
                            delegate_question=self.delegate_question, delegate_spans=self.delegate_spans)

    def rate(self, decision: str, key: str | None = None, table: str = "template_rates") -> float:
        """Probability of an error in ``decision`` for ``key`` (a template or phrase)."""
        specific = getattr(self, table).get(key, {}) if key is not None else {}
        if decision in specific:
            return float(specific[decision])
        return float(self.rates.get(decision, self.noise))


# ---------------------------------------------------------------------- message helpers
def parse_own_turn(text: str) -> tuple[str, Any]:
    """Parse an expert-written assistant message: ("call", (name, args)) or ("answer", text)."""
    if TOOL_CALL_OPEN in text:
        body = text.split(TOOL_CALL_OPEN, 1)[1].split(TOOL_CALL_CLOSE, 1)[0]
        obj = json.loads(body)
        return "call", (obj["name"], obj.get("arguments", {}))
    if ANSWER_OPEN in text:
        return "answer", text.split(ANSWER_OPEN, 1)[1].split(ANSWER_CLOSE, 1)[0]
    raise ValueError(f"not an expert turn: {text[:80]!r}")


def _history(messages: list[dict[str, str]]) -> tuple[str, list[tuple[str, dict[str, Any], str | None]]]:
    """(first user message, [(tool name, arguments, observation or None)])."""
    user = next((m["content"] for m in messages if m["role"] == "user"), "")
    steps: list[tuple[str, dict[str, Any], str | None]] = []
    for m in messages:
        if m["role"] == "assistant":
            kind, val = parse_own_turn(m["content"])
            if kind == "call":
                steps.append((val[0], val[1], None))
        elif m["role"] == "tool" and steps and steps[-1][2] is None:
            name, args, _ = steps[-1]
            steps[-1] = (name, args, m["content"])
    return user, steps


def _links(page_text: str) -> list[tuple[str, str]]:
    """(anchor text, url) of every link in a page text from html_to_text."""
    out = []
    for line in page_text.split("\n"):
        for m in _LINK.finditer(line):
            text = m.group(1).strip(" -|")
            if text:
                out.append((text, m.group(2)))
    return out


def _clean(value: str) -> str:
    return _MARK.sub("", value).strip()


def _as_type(value: str, vtype: str) -> str | None:
    value = _clean(value)
    if vtype == "int":
        m = re.search(r"\d[\d,]*", value)
        return m.group(0).replace(",", "") if m else None
    if vtype == "list":
        return ", ".join(v.strip() for v in value.split(",") if v.strip())
    return value or None


def extract_fact(page_text: str, phrase: str, rng: random.Random | None = None, p_err: float = 0.0) -> str | None:
    """The value of ``phrase`` on a page text (None if absent); misreads a neighbouring row with ``p_err``."""
    label, vtype = PHRASES[phrase]
    if phrase == "attendance":
        m = re.search(r"It drew ([\d,]+) visitors", page_text)
        if not m:
            return None
        value = m.group(1).replace(",", "")
        if rng is not None and rng.random() < p_err:  # misreads the year instead
            y = re.search(r" in (\d{4})\.", page_text)
            return y.group(1) if y else value
        return value
    if vtype == "count":  # the list under the heading: "- Name [url]" lines
        lines = page_text.split("\n")
        if label not in lines:
            return None
        n = 0
        for line in lines[lines.index(label) + 1:]:
            if not re.match(r"^- .+ \[\S+\]$", line):
                break
            n += 1
        if rng is not None and rng.random() < p_err:
            n += 1  # miscounts (e.g. counts the heading too)
        return str(n)
    rows = [(k.strip(), v) for k, v in _ROW.findall(page_text)]
    idx = next((i for i, (k, _) in enumerate(rows) if k == label), None)
    if idx is None:
        return None
    if rng is not None and len(rows) > 1 and rng.random() < p_err:
        idx = idx + 1 if idx + 1 < len(rows) else idx - 1  # systematic: the row below
    return _as_type(rows[idx][1], vtype)


# ---------------------------------------------------------------------- sub-agent
class ExpertSubAgent:
    """Rule-based sub-agent: ``act(messages)`` returns the next assistant message."""

    def __init__(self, config: ExpertConfig | None = None, seed: int | str = 0) -> None:
        self.config = config or ExpertConfig()
        self.seed = seed

    def _p(self, decision: str, task: ParsedSubtask) -> float:
        key = task.phrase if task.kind in ("lookup", "walk") else task.kind
        return self.config.rate(decision, key, table="phrase_rates")

    def act(self, messages: list[dict[str, str]]) -> str:
        user, steps = _history(messages)
        turn = sum(1 for m in messages if m["role"] == "assistant")
        rng = random.Random(f"{self.seed}:sub:{turn}")
        task = parse_subtask(user)
        if task is None:
            return format_answer("I cannot parse this task.")
        n_visits = sum(1 for s in steps if s[0] == "visit")
        # the task's own first line (never a "Context:" line after it) as query and goal, or None
        sentence = user.strip().split("\n", 1)[0].strip() if self.config.task_sentence else None
        if task.kind == "walk":
            return self._walk(task, steps, rng, n_visits, sentence)
        if task.kind == "filter":
            return self._filter(task, steps, rng)
        return self._lookup(task, steps, rng, n_visits, sentence)

    # --- encyclopedia lookups (and the natives list of a city page)
    def _lookup(self, task: ParsedSubtask, steps: list, rng: random.Random, n_visits: int,
                sentence: str | None = None) -> str:
        goal = sentence or (f"people born in {task.name}" if task.kind == "natives"
                            else f"{task.phrase} of {task.name}")
        if not steps:
            return format_tool_call("search", {"query": sentence or task.name})
        last_name, last_args, last_obs = steps[-1]
        if last_name == "visit":
            value = self._read(task, last_obs or "", rng)
            if value is not None:
                return format_answer(value)
        searches = [s for s in steps if s[0] == "search"]
        hits = _HIT.findall(searches[-1][2] or "") if searches else []
        visited = {s[1].get("url") for s in steps if s[0] == "visit"}
        order = [h for h in hits if h[1] == task.name] + [h for h in hits if h[1] != task.name]
        left = [h for h in order if h[2] not in visited]
        if not left or n_visits >= self.config.max_visits:
            return format_answer(NOT_FOUND)
        pick = left[0]
        if last_name == "search" and len(left) > 1 and rng.random() < self._p("search_pick", task):
            pick = rng.choice(left[1:])
        return format_tool_call("visit", {"url": pick[2], "goal": goal})

    def _read(self, task: ParsedSubtask, obs: str, rng: random.Random) -> str | None:
        p = self._p("extract", task)
        if task.kind == "natives":
            lines = obs.split("\n")
            if "Notable people born here" not in lines or not lines[0] == f"# {task.name}":
                return None
            out = []
            for line in lines[lines.index("Notable people born here") + 1:]:
                m = re.match(r"^- (.+?) \[\S+\] \(born (\d{4})\)$", line)
                if not m:
                    break
                out.append(f"{m.group(1)} ({m.group(2)})")
            if len(out) > 1 and rng.random() < p:
                out.pop(rng.randrange(len(out)))
            return "; ".join(out) if out else "None"
        if not obs.startswith(f"# {task.name}\n"):
            return None  # not the entity's page
        return extract_fact(obs, task.phrase, rng, p)

    # --- organisation-site walks
    def _walk(self, task: ParsedSubtask, steps: list, rng: random.Random, n_visits: int,
              sentence: str | None = None) -> str:
        # the sentence without "On the website <root>, ": the URL is the call's other argument, and repeating it
        # would double the call's length (docs/training.md, "Build b6")
        goal = (sentence[sentence.find("find "):] if "find " in sentence else sentence) if sentence \
            else f"{task.phrase} of {task.name}"
        visit_root = format_tool_call("visit", {"url": task.root, "goal": goal})
        if task.phrase not in WALK_PLAN:
            return format_answer(NOT_FOUND)  # no rule for finding this on a site
        visits = [s for s in steps if s[0] == "visit"]
        if not visits:
            return visit_root
        if n_visits >= self.config.max_visits:
            return format_answer(NOT_FOUND)
        start = max(i for i, s in enumerate(visits) if s[1].get("url") == task.root)
        plan = [s.replace("{name}", task.name) for s in WALK_PLAN[task.phrase]]
        pos, prev = 0, visits[start][2] or ""
        for s in visits[start + 1:]:
            older = dict((t, u) for t, u in _links(prev)).get(NEWS_OLDER)
            if s[1].get("url") != older:
                pos += 1
            prev = s[2] or ""
        obs = visits[-1][2] or ""
        if obs.startswith("Error:"):
            return visit_root
        if pos >= len(plan):
            value = extract_fact(obs, task.phrase, rng, self._p("extract", task))
            return format_answer(value) if value is not None else visit_root
        step = plan[pos]
        links = _links(obs)
        if step.startswith("*"):
            target = next((u for t, u in links if step[1:] in t), None) or next((u for t, u in links if t == NEWS_OLDER), None)
        else:
            target = next((u for t, u in links if t == step), None)
        if target is None:
            return visit_root  # lost: start again from the home page
        if rng.random() < self._p("link_pick", task):
            others = [u for _, u in links if u != target]
            if others:
                target = rng.choice(others)
        return format_tool_call("visit", {"url": target, "goal": goal})

    # --- filters: one search + one visit per candidate, then the matches
    def _filter(self, task: ParsedSubtask, steps: list, rng: random.Random) -> str:
        visits = [s for s in steps if s[0] == "visit"]
        last = steps[-1][0] if steps else None
        if last == "search":
            hits = _HIT.findall(steps[-1][2] or "")
            name = task.names[len(visits)]
            pick = next((h for h in hits if h[1] == name), hits[0] if hits else None)
            if pick is None:
                return format_tool_call("search", {"query": name})
            if len(hits) > 1 and rng.random() < self._p("search_pick", task):
                pick = rng.choice([h for h in hits if h is not pick])
            return format_tool_call("visit", {"url": pick[2], "goal": f"is {name} {task.phrase} {task.value}"})
        if len(visits) < len(task.names):
            return format_tool_call("search", {"query": task.names[len(visits)]})
        p = self._p("extract", task)
        matches = []
        for name, (_, _, obs) in zip(task.names, visits):
            ok = self._check(task, name, obs or "")
            if rng.random() < p:
                ok = not ok
            if ok:
                matches.append(name)
        return format_answer("; ".join(matches) if matches else "None")

    @staticmethod
    def _check(task: ParsedSubtask, name: str, obs: str) -> bool:
        if not obs.startswith(f"# {name}\n"):
            return False
        if task.phrase == "industry":
            return re.search(rf", an? {re.escape(task.value)} company\.", obs) is not None
        return any(k == "Occupation" and _clean(v) == task.value for k, v in _ROW.findall(obs))


# ---------------------------------------------------------------------- planner
def _csv_argmax(prompt: str, key: str, value: str) -> str:
    i = prompt.find(ATTACHMENT_MARKER)
    if i < 0:
        return ""
    table = prompt[i + 1:].split("\n", 1)[1] if "\n" in prompt[i + 1:] else ""
    rows = list(csv.DictReader(io.StringIO(table.strip())))
    if not rows:
        return ""
    return max(rows, key=lambda r: float(r[value]))[key]


def _names(result: str) -> list[str]:
    return [re.sub(r"\s*\(\d{4}\)$", "", x).strip() for x in result.split(";") if x.strip() and x.strip() != "None"]


def _int(text: str) -> int | None:
    m = re.search(r"-?\d[\d,]*", text)
    return int(m.group(0).replace(",", "")) if m else None


class ExpertPlanner:
    """Rule-based planner for one task: delegates its gold subtasks, combines the results."""

    def __init__(self, task: dict[str, Any], config: ExpertConfig | None = None, seed: int | str = 0) -> None:
        if "gold" not in task:
            raise ValueError("ExpertPlanner: task has no 'gold' field (generate tasks with harness.world.tasks)")
        self.gold = task["gold"]
        self.config = config or ExpertConfig()
        self.seed = seed

    def _p(self, decision: str) -> float:
        return self.config.rate(decision, self.gold.get("template"))

    def _values(self, prompt: str, results: list[str]) -> dict[str, str]:
        vals = {f"{{r{i}}}": r.strip() for i, r in enumerate(results)}
        pre = self.gold.get("pre")
        if pre and pre["op"] == "csv_argmax":
            vals["{f}"] = _csv_argmax(prompt, pre["key"], pre["value"])
        der = self.gold.get("derive")
        if der and der["op"] == "born_between" and len(results) > der["src"]:
            items = [x.strip() for x in results[der["src"]].split(";")]
            keep = []
            for it in items:
                m = re.match(r"^(.+?) \((\d{4})\)$", it)
                if m and der["lo"] <= int(m.group(2)) <= der["hi"]:
                    keep.append(m.group(1))
            vals["{cands}"] = "; ".join(keep) if keep else "None"
        return vals

    def act(self, messages: list[dict[str, str]]) -> str:
        prompt, steps = _history(messages)
        turn = sum(1 for m in messages if m["role"] == "assistant")
        rng = random.Random(f"{self.seed}:planner:{turn}")
        results = [s[2] or "" for s in steps if s[0] == "delegate"]
        subtasks = self.gold["subtasks"]
        vals = self._values(prompt, results)
        i = len(steps)
        if i < len(subtasks):
            sub = subtasks[i]
            if sub["kind"] == "filter" and i > 0 and rng.random() < self._p("decompose"):
                names = _names(vals.get("{cands}", "") if "{cands}" in sub["task"] else results[-1])
                return format_answer(names[0] if names else NOT_FOUND)  # skips the remaining checks
            text = sub["task"]
            for k, v in vals.items():
                text = text.replace(k, v)
            if sub["kind"] in ("lookup", "walk") and rng.random() < self._p("decompose"):
                text = self._confuse(text, sub, rng)
            elif self.config.delegate_question and len(subtasks) == 1:
                text = self._as_question(prompt, text) or text
            elif self.config.delegate_spans and len(subtasks) > 1:
                text = self._in_question_words(prompt, subtasks, i, text) or text
            return format_tool_call("delegate", {"task": text})
        return format_answer(self._final(results, rng))

    @staticmethod
    def _as_question(prompt: str, text: str) -> str | None:
        """The task's question (with its start line, for a site) when it asks for exactly the subtask ``text``
        (the sub-agent parses both the same), else None."""
        question = prompt.strip().removeprefix("Question:").strip()
        parsed = parse_subtask(question)
        return question if parsed is not None and parsed == parse_subtask(text) else None

    @staticmethod
    def _in_question_words(prompt: str, subtasks: list[dict[str, Any]], i: int, text: str) -> str | None:
        """Hop ``i`` of a chain question in the question's words (``ExpertConfig.delegate_spans``), else None.

        A chain is a run of lookups whose question is the last relation's one-hop question about the nested noun
        phrases of the others (``LOOKUP_QUESTION[r2]`` of ``LOOKUP_NP[r1]`` of ``LOOKUP_NP[r0]`` of the name). Hop
        ``i`` is its noun phrase, or for the last hop the question's frame, about hop ``i``'s subject as ``text``
        (the subtask with earlier results filled in) names it."""
        if any(s["kind"] != "lookup" for s in subtasks) or any(s["relation"] not in LOOKUP_NP for s in subtasks[:-1]):
            return None
        nested = subtasks[0]["subject"]
        for s in subtasks[:-1]:
            nested = LOOKUP_NP[s["relation"]].format(x=nested)
        last = subtasks[-1]["relation"]
        question = prompt.strip().removeprefix("Question:").strip()
        if last not in LOOKUP_QUESTION or question != cap_first(LOOKUP_QUESTION[last].format(x=nested)):
            return None
        parsed = parse_subtask(text)
        if parsed is None or parsed.kind != "lookup":
            return None
        rel = subtasks[i]["relation"]
        if i < len(subtasks) - 1:
            return f"Find {LOOKUP_NP[rel].format(x=parsed.name)}."
        return cap_first(LOOKUP_QUESTION[rel].format(x=parsed.name))

    @staticmethod
    def _confuse(text: str, sub: dict[str, Any], rng: random.Random) -> str:
        phrase = sub["phrase"]
        group = next((g for g in _GROUPS if phrase in g), ())
        others = [p for p in group if p != phrase and (sub["kind"] != "walk" or p in WALK_PLAN)]
        if not others:
            return text
        return text.replace(f"the {phrase} of", f"the {rng.choice(others)} of", 1)

    def _final(self, results: list[str], rng: random.Random) -> str:
        fin = self.gold["final"]
        wrong = rng.random() < self._p("final")
        op = fin["op"]
        if not results:
            return NOT_FOUND
        if op == "last":
            if wrong and len(results) > 1:
                return results[-2].strip()
            return results[-1].strip()
        if op == "sorted_list":
            items = sorted(x.strip() for x in results[-1].split(",") if x.strip())
            if wrong and len(items) > 1:
                items = items[:-1]
            return ", ".join(items)
        nums = [_int(r) for r in results]
        if op == "sub":
            a, b = (nums[fin[k]] if fin[k] < len(nums) else None for k in ("a", "b"))
            if a is None or b is None:
                return NOT_FOUND
            return str(a - b + (1 if wrong else 0))
        if op == "sum":
            if any(n is None for n in nums):
                return NOT_FOUND
            return str(sum(nums) + (1 if wrong else 0))  # type: ignore[arg-type]
        if op == "pick":
            if any(n is None for n in nums):
                return NOT_FOUND
            names = fin["names"]
            pairs = list(zip(nums, names))
            best = min(pairs) if fin["cmp"] == "min" else max(pairs)
            if wrong:
                best = next(p for p in pairs if p != best)
            return best[1]
        raise ValueError(f"unknown final op {op!r} in gold of template {self.gold.get('template')!r}")


# ---------------------------------------------------------------------- episodes
@dataclass
class Transcript:
    """One scripted-expert episode: the planner's messages and, per delegate call, the sub-agent's."""

    task_id: str
    planner: list[dict[str, str]]
    sub_calls: list[list[dict[str, str]]]
    answer: str
    gold_answer: str
    correct: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def answers_match(prediction: str, gold: str) -> bool:
    """The world's own answer rule: the same lower-cased alphanumeric tokens
    (:func:`harness.world.judge.normalise`; thousands separators inside numbers ignored).

    It decides whether a scripted-expert episode solved its task (so which generated tasks are
    kept), and it is the correctness check of the warm start and of training (the planner's reward
    and its training-time evaluation records). It is not the evaluation suite's rule: the
    ``local_*`` twins of :mod:`benchmarks.local` score through their registered
    ``Benchmark.score``, the one public entry point for a benchmark number (GAIA's official scorer
    for ``local_gaia``, ``benchmarks.scoring.answers_match`` for ``local_xbench`` and
    ``local_webwalkerqa``). The rules agree on the gold answers and on case, spacing and punctuation
    between words, but not always: ``The Brisca Labs`` for ``Brisca Labs`` and ``1299.0`` for
    ``1299`` are wrong here and right for the suite's exact rule; ``A-One, B Two`` for the GAIA list
    ``A One, B Two`` is right here and wrong for GAIA's scorer, which keeps punctuation in list items.
    """
    return normalise(prediction) == normalise(gold)


def _run_sub(task_text: str, toolbox: Toolbox, config: ExpertConfig, seed: str, max_turns: int,
             system: str) -> tuple[list[dict[str, str]], str]:
    sub = ExpertSubAgent(config, seed)
    sm = [{"role": "system", "content": system}, {"role": "user", "content": task_text}]
    for _ in range(max_turns):
        out = sub.act(sm)
        sm.append({"role": "assistant", "content": out})
        kind, val = parse_own_turn(out)
        if kind == "answer":
            return sm, val
        sm.append({"role": "tool", "content": toolbox.call(val[0], val[1])})
    return sm, NOT_FOUND


def delegated_subtask_gold(task_text: str, toolbox: Toolbox, *, max_turns: int = 40) -> dict[str, Any] | None:
    """The gold of a subtask *as it was delegated* (``rewards.sub_expert_reference: delegated``, docs/paper.md):
    the noise-free scripted sub-agent solves ``task_text`` through ``toolbox`` and its answer becomes a gold
    subtask for :func:`harness.world.judge.expert_judge` (``kind``, ``answer``, ``list``, ``candidates``).

    None when the text is not in the subtask language (:func:`parse_subtask`) or the expert finds nothing
    (``Not found``, e.g. a garbled name): the caller then judges against the task's gold path instead."""
    parsed = parse_subtask(task_text)
    if parsed is None:
        return None
    _, answer = _run_sub(task_text, toolbox, ExpertConfig(), "judge", max_turns, SUB_AGENT_SYSTEM)
    if answer == NOT_FOUND:
        return None
    return {"kind": parsed.kind, "task": task_text, "answer": answer, "candidates": list(parsed.names),
            "list": parsed.kind in ("lookup", "walk") and parsed.phrase == "products"}


def run_expert_episode(task: dict[str, Any], toolbox: Toolbox, noise: float = 0.0, seed: int = 0, *,
                       config: ExpertConfig | None = None, max_planner_turns: int = 12, max_sub_turns: int = 40,
                       base_dir: str | None = None, planner_system: str = PLANNER_SYSTEM,
                       sub_system: str = SUB_AGENT_SYSTEM) -> Transcript:
    """Run the scripted planner (and a sub-agent per delegate call) on ``task`` through ``toolbox``.

    ``noise`` sets ``ExpertConfig.noise`` when no ``config`` is given. The planner is seeded
    ``f"{seed}:{task_id}"`` and sub-agent call ``i`` ``f"{seed}:{task_id}:{i}"``. A planner or
    sub-agent out of turns ends with ``Not found``.
    """
    config = config or ExpertConfig(noise=noise)
    tid = task_id(task)
    # The task id is part of every seed so that mistakes are independent across tasks.
    planner = ExpertPlanner(task, config, f"{seed}:{tid}")
    messages = [{"role": "system", "content": planner_system},
                {"role": "user", "content": task_prompt(task, base_dir)}]
    subs: list[list[dict[str, str]]] = []
    answer = NOT_FOUND
    for _ in range(max_planner_turns):
        out = planner.act(messages)
        messages.append({"role": "assistant", "content": out})
        kind, val = parse_own_turn(out)
        if kind == "answer":
            answer = val
            break
        sm, result = _run_sub(val[1]["task"], toolbox, config, f"{seed}:{tid}:{len(subs)}", max_sub_turns, sub_system)
        subs.append(sm)
        messages.append({"role": "tool", "content": result})
    gold = str(task["gold"]["answer"])
    return Transcript(tid, messages, subs, answer, gold, answers_match(answer, gold))


def run_expert_single_episode(task: dict[str, Any], toolbox: Toolbox, noise: float = 0.0, seed: int = 0, *,
                              config: ExpertConfig | None = None, max_subtasks: int = 12, max_sub_turns: int = 40,
                              base_dir: str | None = None, system: str = SINGLE_AGENT_SYSTEM) -> Transcript:
    """The same expert as one agent with ``search``/``visit`` (SFT data for ``single_agent``, docs/architecture.md §What the harness is).

    The planner's subtasks are solved in line: the transcript (``planner``; ``sub_calls`` is
    empty) holds every search/visit turn of every subtask, in order, then the final answer.
    Same seeds as :func:`run_expert_episode`, so with the same noise the two make the same
    decisions.
    """
    config = config or ExpertConfig(noise=noise)
    tid = task_id(task)
    planner = ExpertPlanner(task, config, f"{seed}:{tid}")
    prompt = task_prompt(task, base_dir)
    shadow = [{"role": "system", "content": ""}, {"role": "user", "content": prompt}]
    messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    answer = NOT_FOUND
    for i in range(max_subtasks + 1):
        out = planner.act(shadow)
        shadow.append({"role": "assistant", "content": out})
        kind, val = parse_own_turn(out)
        if kind == "answer":
            answer = val
            break
        sm, result = _run_sub(val[1]["task"], toolbox, config, f"{seed}:{tid}:{i}", max_sub_turns, "")
        messages.extend(m for m in sm[2:] if not (m["role"] == "assistant" and ANSWER_OPEN in m["content"]))
        shadow.append({"role": "tool", "content": result})
    messages.append({"role": "assistant", "content": format_answer(answer)})
    gold = str(task["gold"]["answer"])
    return Transcript(tid, messages, [], answer, gold, answers_match(answer, gold))
