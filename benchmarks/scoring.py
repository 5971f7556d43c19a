"""Answer normalisation, accuracy ± standard error and per-cell breakdowns (docs/benchmarks.md).

* :func:`normalize_answer` / :func:`answers_match`: the ``exact`` judge's rule, used by every
  benchmark whose published scorer is not an exact-match function (XBench-DeepSearch and
  WebWalkerQA use an LLM judge upstream; we try the exact match first, docs/benchmarks.md). Lowercase
  (after Unicode NFKC, so full-width Chinese punctuation and digits fold), strip punctuation
  (ASCII and Unicode ``P*`` categories), drop the English articles *a/an/the* as words, remove
  all whitespace; two answers that both parse as numbers (``$ % ,`` and thousands separators
  stripped, as in GAIA's scorer) compare numerically with a relative tolerance of 1e-9.
  GAIA itself is scored by its own official scorer (:func:`benchmarks.gaia.question_scorer`).
* :func:`accuracy`: mean of 0/1 outcomes with the binomial standard error
  ``sqrt(p (1 - p) / n)``; n = 0 gives NaN for both (never a ZeroDivisionError).
* :func:`breakdown` and :func:`webwalkerqa_breakdown`: accuracy overall and per cell; WebWalkerQA
  reports the six ``type`` × ``difficulty_level`` cells of its paper (Wu et al., ACL 2025,
  Table 3), every cell present even when empty.

Everything counted here treats a missing/failed verdict as incorrect (it stays in the
denominator, docs/evaluation.md).
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_WS = re.compile(r"\s+")
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


def _is_punct(ch: str) -> bool:
    return ch in string.punctuation or unicodedata.category(ch).startswith("P") \
        or unicodedata.category(ch) in ("Sc", "Sk", "Sm")


def normalize_answer(text: str) -> str:
    """Lowercase, strip punctuation, articles and all whitespace (see the module docstring)."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if _is_punct(ch) else ch for ch in text)
    text = _ARTICLES.sub(" ", text)
    return _WS.sub("", text)


def parse_number(text: str) -> float | None:
    """The number ``text`` denotes (``$ % ,``/spaces between digit groups stripped), else None."""
    s = unicodedata.normalize("NFKC", text).strip()
    for ch in "$%,€£¥":
        s = s.replace(ch, "")
    s = s.strip().rstrip(".")
    if not _NUMBER.fullmatch(s):
        return None
    value = float(s)
    return value if math.isfinite(value) else None


def answers_match(prediction: str, gold: str) -> bool:
    """The ``exact`` rule: numeric equality when both are numbers, else normalised equality."""
    p_num, g_num = parse_number(prediction), parse_number(gold)
    if p_num is not None and g_num is not None:
        return math.isclose(p_num, g_num, rel_tol=1e-9, abs_tol=0.0)
    norm_gold = normalize_answer(gold)
    return bool(norm_gold) and normalize_answer(prediction) == norm_gold


@dataclass(frozen=True)
class Accuracy:
    """``n`` items, ``n_correct`` of them correct; ``mean`` ± ``stderr`` (binomial)."""

    n: int
    n_correct: int
    mean: float
    stderr: float

    def __str__(self) -> str:
        if self.n == 0:
            return "n/a (n=0)"
        return f"{100 * self.mean:.1f}% ± {100 * self.stderr:.1f} (n={self.n})"


def accuracy(outcomes: Iterable[Any]) -> Accuracy:
    """Accuracy of 0/1 outcomes (bools, or objects with a ``correct`` attribute/key)."""
    values = [_correct_of(o) for o in outcomes]
    n = len(values)
    if n == 0:
        return Accuracy(0, 0, math.nan, math.nan)
    k = sum(values)
    p = k / n
    return Accuracy(n, k, p, math.sqrt(p * (1.0 - p) / n))


def _correct_of(item: Any) -> bool:
    """``correct`` of a bool, a Verdict-like object, a record mapping or a (task, verdict) pair.

    Anything without a clear True counts as incorrect (a missing verdict stays in the
    denominator)."""
    if isinstance(item, bool):
        return item
    if isinstance(item, tuple) and len(item) == 2:
        return _correct_of(item[1])
    if isinstance(item, Mapping):
        return item.get("correct") is True
    return getattr(item, "correct", False) is True


def breakdown(items: Iterable[Any], cell_of: Callable[[Any], Hashable],
              cells: Sequence[Hashable] = ()) -> dict[Hashable, Accuracy]:
    """``{"overall": Accuracy, cell: Accuracy, ...}``; ``cells`` are always present."""
    items = list(items)
    groups: dict[Hashable, list[Any]] = {c: [] for c in cells}
    for item in items:
        groups.setdefault(cell_of(item), []).append(item)
    out: dict[Hashable, Accuracy] = {"overall": accuracy(items)}
    out.update({cell: accuracy(group) for cell, group in groups.items()})
    return out


WEBWALKERQA_TYPES = ("single_source", "multi_source")
WEBWALKERQA_DIFFICULTIES = ("easy", "medium", "hard")
WEBWALKERQA_CELLS = tuple((t, d) for t in WEBWALKERQA_TYPES for d in WEBWALKERQA_DIFFICULTIES)


def _field(item: Any, key: str) -> Any:
    """``key`` from a record mapping (top level, ``metadata`` or ``info``) or a (Task, Verdict)."""
    if isinstance(item, tuple) and len(item) == 2:
        item = getattr(item[0], "metadata", item[0])
    if not isinstance(item, Mapping):
        item = getattr(item, "metadata", {})
    for container in (item, item.get("metadata") or {}, item.get("info") or {}):
        if isinstance(container, Mapping) and key in container:
            return container[key]
    raise KeyError(f"record has no {key!r} (looked at top level, 'metadata' and 'info')")


def webwalkerqa_breakdown(items: Iterable[Any]) -> dict[Hashable, Accuracy]:
    """WebWalkerQA accuracy overall and in the six (type, difficulty_level) cells.

    ``items``: task records (mappings with ``correct`` and ``type``/``difficulty_level`` at the
    top level or under ``metadata``/``info``) or ``(Task, Verdict)`` pairs.
    """
    def cell(item: Any) -> tuple[str, str]:
        key = (_field(item, "type"), _field(item, "difficulty_level"))
        if key not in WEBWALKERQA_CELLS:
            raise ValueError(f"not a WebWalkerQA cell: {key!r}; expected one of {WEBWALKERQA_CELLS}")
        return key

    return breakdown(items, cell, WEBWALKERQA_CELLS)
