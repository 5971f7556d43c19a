"""Unit and fuzz tests of the turn parser (docs/architecture.md §The agent system, harness.agents.parsing)."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.agents.parsing import FinalAnswer, FormatError, ToolCall, parse_turn
from harness.protocol import TOOL_ARGUMENTS, format_answer, format_tool_call

SUB = {"search", "visit"}
PLANNER = {"delegate"}
ALL = set(TOOL_ARGUMENTS)
TAGS = ["<tool_call>", "</tool_call>", "<answer>", "</answer>"]


# ---------------------------------------------------------------- valid turns
def test_tool_call_plain():
    out = parse_turn('<tool_call>{"name": "search", "arguments": {"query": "Ardent Labs"}}</tool_call>', SUB)
    assert out == ToolCall("search", {"query": "Ardent Labs"})


def test_tool_call_with_thought_and_newlines_qwen_style():
    text = 'I should look it up.\n<tool_call>\n{"name": "visit", "arguments": {"url": "http://x/a", "goal": ""}}\n</tool_call>\n'
    assert parse_turn(text, SUB) == ToolCall("visit", {"url": "http://x/a", "goal": ""})


def test_optional_argument_may_be_omitted():
    assert parse_turn(format_tool_call("delegate", {"task": "find X"}), PLANNER) == ToolCall("delegate", {"task": "find X"})


def test_answer_kept_verbatim():
    assert parse_turn("thinking...<answer> Marlow Vance </answer>  \n", PLANNER) == FinalAnswer(" Marlow Vance ")


# ---------------------------------------------------------------- format errors
@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "empty turn"),
        ("   \n", "empty turn"),
        ("I think the answer is 42.", "no action"),
        ("<answer></answer>", "empty <answer>"),
        ("<answer>  \n </answer>", "empty <answer>"),
        ("<answer>42", "not closed"),
        ("42</answer>", "without an opening"),
        ("</answer>42<answer>", "before"),
        ("<answer>a</answer><answer>b</answer>", "2 <answer>"),
        ("<answer><answer>a</answer></answer>", "2 <answer>"),
        ("<answer>42</answer> and also 43", "text after </answer>"),
        ('<answer>x</answer><tool_call>{"name": "search", "arguments": {"query": "q"}}</tool_call>', "not both"),
        ('<tool_call>{"name": "search", "arguments": {"query": "<answer>"}}</tool_call>', "not both"),
        ('<tool_call>{"name": "search", "arguments": {"query": "q"}}', "not closed"),
        ('<tool_call>{"name": "search", "arguments": {"query": "q"}}</tool_call>junk', "text after </tool_call>"),
        (
            '<tool_call>{"name": "search", "arguments": {"query": "a"}}</tool_call>'
            '<tool_call>{"name": "search", "arguments": {"query": "b"}}</tool_call>',
            "2 <tool_call>",
        ),
        ('<tool_call><tool_call>{"name": "search", "arguments": {"query": "q"}}</tool_call></tool_call>', "2 <tool_call>"),
        ("<tool_call></tool_call>", "empty <tool_call>"),
        ('<tool_call>{"name": "search", "arguments": {"query": "q"</tool_call>', "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
        ('<tool_call>{"name": "search"}</tool_call>', "missing 'arguments'"),
        ('<tool_call>{"name": "search", "arguments": {"query": "q"}, "id": 1}</tool_call>', "unexpected 'id'"),
        ('<tool_call>{"name": 3, "arguments": {}}</tool_call>', "name must be a string"),
        ('<tool_call>{"name": "delegate", "arguments": {"task": "t"}}</tool_call>', "unknown tool"),
        ('<tool_call>{"name": "search", "arguments": "q"}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "search", "arguments": {}}</tool_call>', "missing the required argument 'query'"),
        ('<tool_call>{"name": "search", "arguments": {"query": 7}}</tool_call>', "must be a string"),
        ('<tool_call>{"name": "search", "arguments": {"query": " "}}</tool_call>', "is empty"),
        ('<tool_call>{"name": "search", "arguments": {"query": "q", "k": "3"}}</tool_call>', "unknown argument"),
        ('<tool_call>{"name": "search", "name": "visit", "arguments": {"query": "q"}}</tool_call>', "repeats the key"),
        ("<tool_call>" + "[" * 50_000 + "</tool_call>", "JSON"),
    ],
)
def test_format_errors(text, fragment):
    out = parse_turn(text, SUB)
    assert isinstance(out, FormatError), out
    assert fragment in out.reason, out.reason


def test_allowed_tools_respected_per_agent():
    call = format_tool_call("delegate", {"task": "t", "context": "c"})
    assert parse_turn(call, PLANNER) == ToolCall("delegate", {"task": "t", "context": "c"})
    assert isinstance(parse_turn(call, SUB), FormatError)


def test_tool_without_schema_is_a_programming_error():
    with pytest.raises(ValueError, match="no argument schema"):
        parse_turn("<answer>x</answer>", {"calculator"})
    assert parse_turn(
        format_tool_call("calculator", {"problem": "p"}), {"calculator"}, tool_arguments={"calculator": (("problem",), ())}
    ) == ToolCall("calculator", {"problem": "p"})


# ---------------------------------------------------------------- properties
_no_tags = st.text(max_size=200).filter(lambda t: not any(tag in t for tag in TAGS))
_nonblank_no_tags = _no_tags.filter(lambda t: t.strip() != "")


@st.composite
def _valid_calls(draw):
    name = draw(st.sampled_from(sorted(ALL)))
    required, optional = TOOL_ARGUMENTS[name]
    args = {a: draw(_nonblank_no_tags) for a in required}
    for a in optional:
        if draw(st.booleans()):
            args[a] = draw(_no_tags)
    return name, args


@settings(max_examples=300, deadline=None)
@given(_valid_calls(), st.sampled_from(["", "thought\n", "  "]), st.sampled_from(["", "\n", "  \n "]))
def test_round_trip_tool_call(call, before, after):
    name, args = call
    assert parse_turn(before + format_tool_call(name, args) + after, ALL) == ToolCall(name, args)


@settings(max_examples=300, deadline=None)
@given(_nonblank_no_tags)
def test_round_trip_answer(text):
    assert parse_turn(format_answer(text), ALL) == FinalAnswer(text)


def _fragments():
    return st.one_of(
        st.text(max_size=30),
        st.sampled_from(TAGS + ["{", "}", '"', ":", ",", "[", "]", '"name"', '"arguments"', '"query"', '"search"', "\\", "\n"]),
    )


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_fragments(), max_size=40))
def test_fuzz_never_raises_and_returns_exactly_one_kind(parts):
    out = parse_turn("".join(parts), ALL)
    assert type(out) in (ToolCall, FinalAnswer, FormatError)
    if isinstance(out, FormatError):
        assert out.reason


@settings(max_examples=200, deadline=None)
@given(_valid_calls(), st.data())
def test_fuzz_truncated_tool_calls_are_errors(call, data):
    text = format_tool_call(*call)
    cut = data.draw(st.integers(0, len(text) - 1))
    assert isinstance(parse_turn(text[:cut], ALL), FormatError)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example])
@given(
    st.sampled_from(["a", "<", "{", "[", '"', "é", "\U0001f600", "<tool_call>", "<answer>", "\\"]),
    st.sampled_from(["", "<tool_call>", "<answer>", '<tool_call>{"name": "search", "arguments": {"query": "']),
    st.sampled_from(["", "</tool_call>", "</answer>", '"}}</tool_call>']),
)
def test_fuzz_long_inputs_are_fast(unit, prefix, suffix):
    text = prefix + unit * (100_000 // len(unit)) + suffix
    start = time.perf_counter()
    out = parse_turn(text, ALL)
    elapsed = time.perf_counter() - start
    assert type(out) in (ToolCall, FinalAnswer, FormatError)
    # linear-time parser: 100k chars takes about a millisecond; a backtracking regex takes minutes
    assert elapsed < 2.0, f"{elapsed:.2f}s for {len(text)} chars"


def test_long_valid_answer_and_call():
    long = "x" * 100_000
    assert parse_turn(format_answer(long), ALL) == FinalAnswer(long)
    assert parse_turn(format_tool_call("search", {"query": long}), ALL) == ToolCall("search", {"query": long})


def test_reasons_are_human_readable_and_short():
    out = parse_turn("<answer>a</answer>" + "junk " * 10_000, ALL)
    assert isinstance(out, FormatError)
    assert len(out.reason) < 200
    json.dumps(out.reason)  # serialisable into records


def test_benchmark_parse(benchmark):
    text = "Let me search.\n" + format_tool_call("visit", {"url": "http://127.0.0.1:8000/wiki/a.html", "goal": "founder"})
    out = benchmark(parse_turn, text, SUB)
    assert isinstance(out, ToolCall)
