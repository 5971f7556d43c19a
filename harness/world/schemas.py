"""The three task schemas of the offline world's benchmarks, and what reads any row of them (docs/world.md).

The world poses its tasks in the schemas of the benchmarks it stands in for (see
:mod:`harness.world.tasks`): GAIA (``task_id, Question, Level, Final answer, ...``), WebWalkerQA
(``question, answer, root_url, info{...}``) and XBench-DeepSearch (``id, prompt, answer``).
This module is the one definition of those benchmark styles (:data:`BENCHMARKS`, the config
fields ``tasks.benchmarks`` of training and ``benchmarks`` of the warm start check against it),
their fields, and the functions every consumer of a row needs: :func:`benchmark_of`,
:func:`task_id` and :func:`task_prompt`.

It sits below :mod:`harness.world.tasks` (generation, files) and :mod:`harness.world.expert`
(which poses a row to its planner and verifies generated rows), so neither imports the other
back; both re-export what they used to define here. It imports only the standard library, so
configuration code can read :data:`BENCHMARKS` without loading the world.
"""

from __future__ import annotations

import os
from typing import Any

BENCHMARKS = ("gaia", "webwalkerqa", "xbench")
"""The benchmark styles of the world's tasks (the ``local_*`` twins of the evaluation suite pose them)."""
GAIA_FIELDS = ("task_id", "Question", "Level", "Final answer", "file_name", "file_path", "Annotator Metadata")
GAIA_META = ("Steps", "Number of steps", "How long did this take?", "Tools", "Number of tools")
WEBWALKER_FIELDS = ("question", "answer", "root_url", "info")
WEBWALKER_INFO = ("domain", "lang", "source_website", "golden_path", "type", "difficulty_level")
XBENCH_FIELDS = ("id", "prompt", "answer")
ATTACHMENT_MARKER = "\nAttached file "
"""How :func:`task_prompt` introduces an attachment's content (the expert planner looks for it)."""
START_MARKER = "\n\nStart from this website: "
"""What precedes a WebWalkerQA task's ``root_url`` in its prompt (the subtask language reads it back)."""


def benchmark_of(task: dict[str, Any]) -> str:
    """``gaia``, ``webwalkerqa`` or ``xbench`` from a task's fields."""
    if "Question" in task:
        return "gaia"
    if "root_url" in task:
        return "webwalkerqa"
    if "prompt" in task:
        return "xbench"
    raise ValueError("unknown task schema")


def task_id(task: dict[str, Any]) -> str:
    """The id field of a task in any of the three schemas."""
    for k in ("task_id", "id"):
        if k in task:
            return str(task[k])
    return str(task.get("gold", {}).get("uid", ""))


def task_prompt(task: dict[str, Any], base_dir: str | None = None) -> str:
    """The user message that poses ``task`` (any of the three schemas) to the planner / single agent.

    GAIA attachments are appended as text (``\\nAttached file <name>:\\n<content>``), read from
    ``gold.attachment.content`` or from ``base_dir/file_path``.
    """
    if "Question" in task:
        text = task["Question"]
        if task.get("file_name"):
            content = task.get("gold", {}).get("attachment", {}).get("content")
            if content is None and base_dir is not None:
                with open(os.path.join(base_dir, task["file_path"]), encoding="utf-8") as fh:
                    content = fh.read()
            if content is not None:
                text += f"\n{ATTACHMENT_MARKER}{task['file_name']}:\n{content}"
        return text
    if "root_url" in task:
        return f"{task['question']}{START_MARKER}{task['root_url']}"
    if "prompt" in task:
        return str(task["prompt"])
    raise ValueError("task_prompt: unknown task schema (expected GAIA 'Question', WebWalkerQA 'question'+'root_url' or XBench 'prompt')")
