"""Requests with `tools`: streamed OpenAI `tool_calls` deltas in SGLang's shape, or plain text."""

from __future__ import annotations

import json

import pytest
from sim_http import chat, chat_payload

from loadlib.scenarios.corpus import tools
from loadlib.scenarios.toolcall import ToolCall
from loadlib.wire.sse import parse_stream

SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in tools()}


def triage_payload(tool_choice: object = "auto", **kw) -> dict:
    """What the `tool-call` scenario sends: its system prompt, a work item, the triage tools."""
    job = ToolCall(tool_choice=tool_choice).next(0)
    payload = chat_payload(**kw)
    payload["messages"] = job.messages
    payload.update(job.params)
    return payload


@pytest.mark.processes
def test_the_tool_call_scenario_gets_sglang_tool_call_deltas(sim):
    reply = chat(sim.url, triage_payload(max_tokens=1024))
    deltas = reply.tool_deltas
    firsts = [d for d in deltas if d["id"] is not None]
    assert firsts and all(d["id"].startswith("call_") and d["type"] == "function"
                          and d["function"]["name"] in SCHEMAS and d["function"]["arguments"] == ""
                          for d in firsts)
    assert all(d["function"]["name"] is None and d["type"] == "function" for d in deltas if d["id"] is None)
    assert not any(d.get("content") for d in reply.deltas)
    for call in reply.tool_calls:
        arguments = json.loads(call["arguments"])
        schema = SCHEMAS[call["name"]]
        assert set(schema["required"]) <= set(arguments) <= set(schema["properties"])
    finish = reply.events[-3]["choices"][0]
    assert finish["finish_reason"] == "tool_calls" and finish["matched_stop"] == 151645
    summary = parse_stream([reply.body_bytes], [0.0])  # the client's own parser
    assert summary.chunks == len(deltas) and summary.finish_reason == "tool_calls"
    assert summary.completion_tokens == reply.usage["completion_tokens"] > len(deltas)


@pytest.mark.processes
def test_tool_calls_are_deterministic_per_prompt_and_match_the_non_streamed_answer(sim):
    payload = triage_payload(max_tokens=1024)  # each scenario job has its own ticket number
    first, second = chat(sim.url, payload), chat(sim.url, payload)
    assert first.tool_deltas == second.tool_deltas
    whole = chat(sim.url, {**payload, "stream": False}).body["choices"][0]
    assert whole["finish_reason"] == "tool_calls" and whole["message"]["content"] is None
    assert [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in whole["message"]["tool_calls"]] == first.tool_calls


@pytest.mark.processes
@pytest.mark.parametrize("tool_choice, prompt", [
    ("none", "Reply only with tool calls."),  # tools switched off
    ("auto", "Tell me about autumn in Beijing."),  # nothing asks for a tool
])
def test_plain_text_when_no_tool_call_is_wanted(sim, tool_choice, prompt):
    payload = chat_payload(prompt, max_tokens=40, tools=list(tools()), tool_choice=tool_choice)
    reply = chat(sim.url, payload)
    assert reply.text and not reply.tool_deltas and reply.usage["completion_tokens"] == 40


@pytest.mark.processes
def test_a_named_or_required_tool_choice_calls_tools_even_unasked(sim):
    named = {"type": "function", "function": {"name": "add_labels"}}
    reply = chat(sim.url, chat_payload("Tell me about autumn.", max_tokens=512, tools=list(tools()),
                                       tool_choice=named))
    assert {c["name"] for c in reply.tool_calls} == {"add_labels"}
    required = chat(sim.url, chat_payload("Tell me about autumn.", max_tokens=2048, tools=list(tools()),
                                          tool_choice="required", thinking=True))
    kinds = ["r" if d.get("reasoning_content") else "t" for d in required.deltas if
             d.get("reasoning_content") or d.get("tool_calls")]
    assert kinds[0] == "r" and "t" in kinds and "".join(kinds).rfind("r") < "".join(kinds).find("t")
    unknown = {"type": "function", "function": {"name": "no_such_tool"}}
    bad = chat(sim.url, chat_payload(max_tokens=8, tools=list(tools()), tool_choice=unknown))
    assert bad.status == 400 and "no_such_tool" in bad.body["message"]


@pytest.mark.processes
def test_max_tokens_cuts_a_tool_call_short_with_finish_length(sim):
    comment = {"type": "function", "function": {"name": "post_comment"}}  # a body of 20+ words
    reply = chat(sim.url, chat_payload("Post a comment on issue 7 about the cache eviction bug.",
                                       max_tokens=24, tools=list(tools()), tool_choice=comment))
    assert reply.usage["completion_tokens"] == 24 and reply.events[-3]["choices"][0]["finish_reason"] == "length"
    [call] = reply.tool_calls
    assert call["name"] == "post_comment" and call["arguments"].startswith("{")
    with pytest.raises(ValueError):
        json.loads(call["arguments"])
