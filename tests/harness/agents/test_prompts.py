"""Tests of harness.agents.prompts: system prompts, rendering with tools, episode token pieces (docs/architecture.md §The agent system)."""

from __future__ import annotations

import pytest
import torch

from harness.agents.parsing import FinalAnswer, ToolCall, parse_turn
from harness.agents.prompts import (
    AGENT_PROMPTS,
    EpisodeTokens,
    agent_prompt,
    initial_messages,
    render_chat,
)
from harness.protocol import format_answer, format_tool_call, render_search_results, SearchHit
from harness.models import build_tiny_tokenizer

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tokenizer():
    corpus = [p.system for p in AGENT_PROMPTS.values()] + ["Ardent Labs Marlow Vance 1987 http://127.0.0.1:8000/wiki/a.html"] * 5
    return build_tiny_tokenizer(corpus, vocab_size=400)


def test_roles_and_tools():
    assert agent_prompt("planner").allowed_tools == {"delegate"}
    assert agent_prompt("sub_agent").allowed_tools == {"search", "visit"}
    assert agent_prompt("single_agent").allowed_tools == {"search", "visit"}
    assert "delegate" in agent_prompt("planner").system
    with pytest.raises(ValueError, match="unknown agent role"):
        agent_prompt("critic")


def test_initial_messages():
    msgs = initial_messages("sub_agent", "Find the founder of Ardent Labs.", "Ardent Labs is a company.")
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert msgs[1]["content"] == "Task: Find the founder of Ardent Labs.\nContext: Ardent Labs is a company."
    assert initial_messages("sub_agent", "t")[1]["content"] == "Task: t"
    assert initial_messages("planner", "Who?")[1]["content"] == "Question: Who?"
    with pytest.raises(ValueError, match="context"):
        initial_messages("planner", "Who?", "ctx")


def test_render_lists_each_agents_tools(tokenizer):
    for role, prompt in AGENT_PROMPTS.items():
        text = render_chat(tokenizer, initial_messages(role, "q"), prompt.tools, add_generation_prompt=True)
        for name in ("search", "visit", "delegate"):
            assert (f'\n- {name}(' in text) == (name in prompt.allowed_tools), (role, name)
        assert text.endswith("<|im_start|>assistant\n")


def test_render_without_template_is_a_clear_error(tokenizer):
    class NoTemplate:
        chat_template = None
        name_or_path = "base-model"

    with pytest.raises(ValueError, match="no chat template"):
        render_chat(NoTemplate(), [{"role": "user", "content": "x"}])


def test_episode_pieces_match_the_template(tokenizer):
    prompt = agent_prompt("sub_agent")
    et = EpisodeTokens(tokenizer, prompt.tools)
    assert et.end_of_turn_text == "<|im_end|>"
    assert et.stop_token_ids == [tokenizer.eos_token_id]
    hits = [SearchHit("Ardent Labs", "http://127.0.0.1:8000/wiki/a.html", "Ardent Labs was founded in 1987.")]
    messages = initial_messages("sub_agent", "Find the founder.") + [
        {"role": "assistant", "content": "Search first.\n" + format_tool_call("search", {"query": "Ardent Labs"})},
        {"role": "tool", "content": render_search_results(hits)},
        {"role": "assistant", "content": format_tool_call("visit", {"url": hits[0].url, "goal": "founder"})},
        {"role": "tool", "content": "Ardent Labs was founded by Marlow Vance."},
        {"role": "assistant", "content": format_answer("Marlow Vance")},
    ]
    et.check(messages)  # raises if the pieces do not concatenate to the template's tokens

    # build the trajectory a rollout would: prompt_ids, completion_ids, env_mask
    prompt_ids = et.prompt_ids(messages[:2])
    completion, env_mask = [], []
    for m in messages[2:]:
        piece = et.assistant_ids(m["content"]) if m["role"] == "assistant" else et.observation_ids(m["content"])
        completion += piece
        env_mask += [1 if m["role"] == "assistant" else 0] * len(piece)
    full = tokenizer(render_chat(tokenizer, messages, prompt.tools), add_special_tokens=False)["input_ids"]
    assert prompt_ids + completion == full[: len(prompt_ids) + len(completion)]
    assert tokenizer.decode(full[len(prompt_ids) + len(completion) :]) == "\n"
    assert sum(env_mask) == sum(len(et.assistant_ids(m["content"])) for m in messages if m["role"] == "assistant")
    # observation pieces start right after <|im_end|> and open the next assistant turn
    obs = et.observation_text("X")
    assert obs == "\n<|im_start|>user\n<tool_response>\nX\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


def test_decode_turn_feeds_the_parser(tokenizer):
    et = EpisodeTokens(tokenizer, agent_prompt("sub_agent").tools)
    call = format_tool_call("search", {"query": "Marlow Vance 1987"})
    assert parse_turn(et.decode_turn(et.assistant_ids(call)), {"search", "visit"}) == ToolCall(
        "search", {"query": "Marlow Vance 1987"}
    )
    assert parse_turn(et.decode_turn(et.assistant_ids(format_answer("42"))), {"search"}) == FinalAnswer("42")
