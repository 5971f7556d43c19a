"""System prompts, chat rendering and the token ids of an episode's pieces (docs/architecture.md §The agent system).

Three agents (docs/architecture.md §The agent system): the *planner* (tool ``delegate``), the *sub-agent* (``search``, ``visit``)
and the *single agent* (the planner's job with ``search``/``visit`` instead of ``delegate``); with
``tools.reasoner`` the planner's prompt is ``planner_reasoner`` (``delegate`` and the untrained ``reasoner``). Each
has a system prompt here and its tool schemas from :mod:`harness.protocol`, which are
passed to the tokenizer's chat template as ``tools=`` so that they appear in the system turn the
way the model's own template lists tools (Qwen-style templates: a ``<tools>`` block).

:class:`EpisodeTokens` gives the token ids a rollout concatenates into one token-level trajectory
(docs/architecture.md §The agent system: ``prompt_ids``, ``completion_ids`` = assistant turns and the observations between
them, ``env_mask`` = 1 on model tokens, 0 on observation tokens):

* ``prompt_ids(messages)``: system + user turn + the opening of the first assistant turn;
* the model's generation for a turn, which ends with the end-of-turn token
  (``stop_token_ids``; ``<|im_end|>`` for Qwen-style templates), or ``assistant_ids(text)`` for
  a turn written by someone else (the scripted expert, for SFT);
* ``observation_ids(content)``: everything the template puts between the end of one assistant
  turn and the start of the next assistant generation (the tool message and the new assistant
  opening).

These pieces are derived from the template itself by rendering probe conversations and taking
text differences, so they work unchanged for any chat template that renders a conversation as a
concatenation of turns (Qwen, SmolLM2/ChatML); :meth:`EpisodeTokens.check` verifies, for one
conversation, that the concatenation equals the template's rendering of the whole conversation.

Deliberate deviation: a turn cut off by ``max_new_tokens`` (no end-of-turn token) is closed by the
rollout with ``end_of_turn_ids`` before the observation; the template would render the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from harness.protocol import PLANNER_REASONER_TOOLS, PLANNER_TOOLS, SINGLE_AGENT_TOOLS, SUB_AGENT_TOOLS

__all__ = [
    "AgentRole",
    "AgentPrompt",
    "PLANNER_SYSTEM_PROMPT",
    "SUB_AGENT_SYSTEM_PROMPT",
    "SINGLE_AGENT_SYSTEM_PROMPT",
    "AGENT_PROMPTS",
    "agent_prompt",
    "initial_messages",
    "render_chat",
    "EpisodeTokens",
]

AgentRole = Literal["planner", "sub_agent", "single_agent"]

PLANNER_SYSTEM_PROMPT = (
    "You are the planner of a research team. Answer the user's question. You cannot search the web "
    "yourself: give one self-contained subtask at a time to the sub-agent with the delegate tool, "
    "and put the facts it needs in the context. Use its results to plan the next step. "
    "Each turn, either call one tool or give the final answer as <answer>...</answer>. "
    "The final answer is short: only the name, number or date asked for."
)
PLANNER_REASONER_SYSTEM_PROMPT = PLANNER_SYSTEM_PROMPT + (
    " For reasoning that needs no web search (calculations, logic, comparing facts you have) you may ask the "
    "reasoner tool."
)
SUB_AGENT_SYSTEM_PROMPT = (
    "You are a research assistant with a web search engine and a browser. Solve the task you are "
    "given: search, visit the pages that look relevant and read them. "
    "Each turn, either call one tool or give your result as <answer>...</answer>. "
    "The result states the fact you found, briefly."
)
SINGLE_AGENT_SYSTEM_PROMPT = (
    "You are a research assistant with a web search engine and a browser. Answer the user's question: "
    "search, visit the pages that look relevant and read them. "
    "Each turn, either call one tool or give the final answer as <answer>...</answer>. "
    "The final answer is short: only the name, number or date asked for."
)


@dataclass(frozen=True)
class AgentPrompt:
    """What one agent sees: its system prompt and its tool schemas."""

    role: AgentRole
    """Which agent (``planner``, ``sub_agent``, ``single_agent``)."""
    system: str
    """System prompt text (tool schemas are added by the chat template, not written here)."""
    tools: tuple[dict[str, Any], ...]
    """Tool schemas in OpenAI function format, passed to the chat template as ``tools=``."""

    @property
    def allowed_tools(self) -> frozenset[str]:
        """Tool names this agent may call (for :func:`harness.agents.parsing.parse_turn`)."""
        return frozenset(t["function"]["name"] for t in self.tools)


AGENT_PROMPTS: dict[str, AgentPrompt] = {
    "planner": AgentPrompt("planner", PLANNER_SYSTEM_PROMPT, tuple(PLANNER_TOOLS)),
    # the planner with the optional reasoner tool (tools.reasoner); its trajectories are the planner's
    "planner_reasoner": AgentPrompt("planner", PLANNER_REASONER_SYSTEM_PROMPT, tuple(PLANNER_REASONER_TOOLS)),
    "sub_agent": AgentPrompt("sub_agent", SUB_AGENT_SYSTEM_PROMPT, tuple(SUB_AGENT_TOOLS)),
    "single_agent": AgentPrompt("single_agent", SINGLE_AGENT_SYSTEM_PROMPT, tuple(SINGLE_AGENT_TOOLS)),
}


def agent_prompt(role: str) -> AgentPrompt:
    """The :class:`AgentPrompt` of ``role``; a clear ``ValueError`` for an unknown role."""
    try:
        return AGENT_PROMPTS[role]
    except KeyError:
        raise ValueError(f"unknown agent role {role!r}; expected one of {sorted(AGENT_PROMPTS)}") from None


def initial_messages(role: str, text: str, context: str = "") -> list[dict[str, str]]:
    """System + user messages that start an episode.

    ``text`` is the question (planner, single agent) or the subtask (sub-agent); ``context`` is the
    planner's context for a subtask (sub-agent only; ignored when empty).
    """
    prompt = agent_prompt(role)
    if role == "sub_agent":
        user = f"Task: {text}" + (f"\nContext: {context}" if context.strip() else "")
    else:
        if context:
            raise ValueError(f"context is only for the sub-agent, not for {role!r}")
        user = f"Question: {text}"
    return [{"role": "system", "content": prompt.system}, {"role": "user", "content": user}]


def render_chat(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = False,
) -> str:
    """The chat template's text of ``messages`` with ``tools`` listed in the system turn."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', type(tokenizer).__name__)!r} has no chat template; "
            "use an instruct/chat model or set tokenizer.chat_template"
        )
    return tokenizer.apply_chat_template(
        list(messages),
        tools=list(tools) if tools else None,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
    )


_SENTINEL = "\x00SENTINEL-7f3a\x00"


class EpisodeTokens:
    """Token ids of the pieces of one agent's episode, consistent with the chat template.

    ``tools`` are the schemas rendered in the system turn (use the agent's
    :attr:`AgentPrompt.tools`). Construction renders two probe conversations to learn the
    template's end-of-turn text and the text between turns; it raises ``ValueError`` for a
    template that is not a concatenation of turns.
    """

    def __init__(self, tokenizer: Any, tools: Sequence[dict[str, Any]] | None = None) -> None:
        self.tokenizer = tokenizer
        self.tools = list(tools or [])
        probe = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _SENTINEL}]
        text = render_chat(tokenizer, probe, self.tools)
        at = text.find(_SENTINEL)
        if at < 0:
            raise ValueError("the chat template does not render assistant content verbatim")
        after = text[at + len(_SENTINEL) :]
        eos = tokenizer.eos_token
        specials = [s for s in tokenizer.all_special_tokens if s and s in after]
        if eos and eos in after:
            end = after[: after.index(eos) + len(eos)]
        elif specials:
            first = min(specials, key=after.index)
            end = after[: after.index(first) + len(first)]
        else:
            raise ValueError(f"cannot find the end-of-turn token in the template's text after a turn: {after!r}")
        self.end_of_turn_text: str = end
        """Text that closes an assistant turn (``<|im_end|>`` for Qwen/ChatML templates)."""
        self.end_of_turn_ids: list[int] = self._encode(end)
        """Token ids that close an assistant turn; the last one is the stop token."""
        self.stop_token_ids: list[int] = sorted({self.end_of_turn_ids[-1]} | (
            {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()))
        """Token ids that end a generation (pass to the backend's ``stop_token_ids``)."""
        self._turn_prefix = text[: at] + _SENTINEL + end
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        self._specials: list[str] = sorted(
            {s for s in list(tokenizer.all_special_tokens) + [t.content for t in added.values() if t.special] if s},
            key=len, reverse=True)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def inert(self, content: str) -> str:
        """``content`` with every special-token string (``<|im_end|>``, ``<|endoftext|>``...) broken by a
        zero-width space after its first character, so that text from outside (a web page, a question, a
        delegated task) tokenises as ordinary text and cannot close a turn or open a fake one."""
        for s in self._specials:
            if s in content:
                content = content.replace(s, s[:1] + "\u200b" + s[1:])
        return content

    def _untrusted(self, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """``messages`` with the text from outside (user and tool turns) made inert; ours and the model's kept."""
        return [m if m["role"] in ("system", "assistant") else {**m, "content": self.inert(str(m["content"]))}
                for m in messages]

    def prompt_ids(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        """Ids of ``messages`` (system, user) plus the opening of the first assistant turn; special-token
        strings in the user turn are made inert (:meth:`inert`)."""
        return self._encode(render_chat(self.tokenizer, self._untrusted(messages), self.tools,
                                        add_generation_prompt=True))

    def assistant_ids(self, text: str) -> list[int]:
        """Ids of an assistant turn written as ``text`` (e.g. the scripted expert), closed by end-of-turn."""
        return self._encode(text) + list(self.end_of_turn_ids)

    def observation_text(self, content: str) -> str:
        """Template text after an assistant turn's end-of-turn token, through the next assistant opening."""
        probe = [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": _SENTINEL},
            {"role": "tool", "content": self.inert(content)},  # a page may hold "<|im_end|>" as text
        ]
        text = render_chat(self.tokenizer, probe, self.tools, add_generation_prompt=True)
        if not text.startswith(self._turn_prefix):
            raise ValueError("the chat template renders earlier turns differently once a tool message follows")
        return text[len(self._turn_prefix) :]

    def observation_ids(self, content: str) -> list[int]:
        """Ids of a tool observation ``content`` between two assistant turns (``env_mask`` = 0)."""
        return self._encode(self.observation_text(content))

    def decode_turn(self, ids: Sequence[int]) -> str:
        """Text of a generated turn for the parser (special tokens such as ``<|im_end|>`` removed)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def check(self, messages: Sequence[dict[str, Any]]) -> None:
        """Assert that the pieces of ``messages`` (system, user, then assistant/tool turns ending with an
        assistant turn) concatenate to the template's own tokenisation of the whole conversation."""
        head = [m for m in messages if m["role"] in ("system", "user")][:2]
        n_head = len(head)
        ids = self.prompt_ids(messages[:n_head])
        for m in messages[n_head:]:
            ids += self.assistant_ids(m["content"]) if m["role"] == "assistant" else self.observation_ids(m["content"])
        full = render_chat(self.tokenizer, self._untrusted(messages), self.tools)
        expected = self._encode(full)
        if expected[: len(ids)] != ids or self.tokenizer.decode(expected[len(ids):]).strip():
            raise AssertionError("episode pieces do not match the chat template's rendering")
