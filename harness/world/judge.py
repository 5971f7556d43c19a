"""Offline expert judge of a sub-agent result (docs/paper.md ``r_expert``, docs/world.md).

``expert_judge(subtask_gold, result_text)`` scores in [0, 1] whether a sub-agent's result
contains the fact that the gold path needs for that subtask (a gold subtask as written by
:mod:`harness.world.tasks`, a dict with at least ``answer``; ``kind`` and ``candidates``
refine it):

* numbers: 1 if any number in the result (thousands separators ignored) equals the gold one;
* names / text: 1 if the gold's normalised tokens occur as a contiguous run in the result's;
* lists (``products``, ``natives``): the fraction of gold items present;
* ``filter`` subtasks: Jaccard overlap between the candidates the result names and the gold
  matches (so naming every candidate is not rewarded); gold ``None`` scores 1 only if the
  result names no candidate.

:func:`match_subtask` picks the gold subtask a delegated task text corresponds to (for a
planner whose decomposition differs from the gold). Normalisation: lower case, alphanumeric
tokens only. Deliberate decision: the judge is lenient about extra words ("The price is 1299
USD." matches ``1299``) because it judges content, not format (format has its own reward).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

_TOK = re.compile(r"[a-z0-9]+")
_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def normalise(text: str) -> list[str]:
    """Lower-cased alphanumeric tokens, thousands separators inside numbers removed."""
    return _TOK.findall(re.sub(r"(?<=\d),(?=\d{3})", "", text.lower()))


def _contains(haystack: list[str], needle: list[str]) -> bool:
    if not needle:
        return False
    n = len(needle)
    return any(haystack[i:i + n] == needle for i in range(len(haystack) - n + 1))


def _numbers(text: str) -> set[str]:
    return {m.replace(",", "") for m in _NUM.findall(text)}


def _item_score(gold: str, result: str, rtoks: list[str]) -> float:
    gold = gold.strip()
    if re.fullmatch(r"-?\d[\d,]*(\.\d+)?", gold):
        return 1.0 if gold.replace(",", "") in _numbers(result) else 0.0
    return 1.0 if _contains(rtoks, normalise(gold)) else 0.0


def expert_judge(subtask_gold: dict[str, Any], result_text: str) -> float:
    """Score in [0, 1]: does ``result_text`` contain the fact ``subtask_gold`` needs?"""
    if "answer" not in subtask_gold:
        raise ValueError("expert_judge: subtask_gold has no 'answer' field (expected a gold subtask of harness.world.tasks)")
    gold = str(subtask_gold["answer"])
    kind = subtask_gold.get("kind", "lookup")
    result = result_text or ""
    rtoks = normalise(result)
    if kind == "filter":
        cands = [str(c) for c in subtask_gold.get("candidates", [])]
        named = {c for c in cands if _contains(rtoks, normalise(c))}
        want = set() if gold == "None" else {g.strip() for g in gold.split(";") if g.strip()}
        if not want:
            return 1.0 if not named else 0.0
        return len(named & want) / len(named | want)
    if kind == "natives":
        items = [re.sub(r"\s*\(\d{4}\)$", "", g).strip() for g in gold.split(";") if g.strip()]
    elif kind in ("lookup", "walk") and subtask_gold.get("list"):
        items = [g.strip() for g in gold.split(",") if g.strip()]
    else:
        items = [gold]
    if not items:
        return 0.0
    return sum(_item_score(g, result, rtoks) for g in items) / len(items)


def match_subtask(gold_subtasks: Sequence[dict[str, Any]], task_text: str) -> int | None:
    """Index of the gold subtask most similar to ``task_text`` (token Jaccard), None if no overlap."""
    toks = set(normalise(task_text))
    best, best_i = 0.0, None
    for i, g in enumerate(gold_subtasks):
        gt = set(normalise(str(g.get("task", ""))))
        if not gt or not toks:
            continue
        j = len(toks & gt) / len(toks | gt)
        if j > best:
            best, best_i = j, i
    return best_i
