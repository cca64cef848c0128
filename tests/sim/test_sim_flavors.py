"""`--flavor vllm|llamacpp` switch the chunk shapes to those servers' own."""

from __future__ import annotations

import pytest
from sim_http import chat, chat_payload

from loadlib.scenarios.corpus import tools
from loadlib.sim.process import start_simulator
from loadlib.wire.sse import parse_stream


@pytest.fixture(scope="module")
def vllm():
    with start_simulator(["--time-scale", "0.02", "--flavor", "vllm"]) as proc:
        yield proc


@pytest.fixture(scope="module")
def llamacpp():
    with start_simulator(["--time-scale", "0.02", "--flavor", "llamacpp"]) as proc:
        yield proc


@pytest.mark.processes
def test_vllm_omits_unset_fields_and_finishes_on_the_last_token_chunk(vllm):
    reply = chat(vllm.url, max_tokens=40, headers={"X-Request-Id": "v1"})
    role, *tokens, usage, done = reply.events
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "usage" not in role and role["id"] == "chatcmpl-v1"
    assert all(list(t["choices"][0]["delta"]) == ["content"] for t in tokens)
    assert [t["choices"][0]["finish_reason"] for t in tokens][-2:] == [None, "length"]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 40 and done == "[DONE]"


@pytest.mark.processes
def test_vllm_reasoning_is_delta_reasoning(vllm):
    reply = chat(vllm.url, max_tokens=200, thinking=True)
    assert reply.deltas[1].get("reasoning") and "reasoning_content" not in reply.deltas[1]


@pytest.mark.processes
def test_llamacpp_role_chunk_comments_and_timings(llamacpp):
    reply = chat(llamacpp.url, max_tokens=40)
    assert reply.headers["server"] == "llama.cpp"
    assert any(line.startswith(":") for line in reply.lines)
    role = reply.events[0]
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": None}
    finish, usage, done = reply.events[-3:]
    assert finish["choices"][0] == {"finish_reason": "length", "index": 0, "delta": {}}
    assert finish["timings"]["predicted_n"] == 40 and usage["usage"]["completion_tokens"] == 40
    assert done == "[DONE]"


@pytest.mark.processes
def test_llamacpp_sends_no_done_after_an_error(llamacpp):
    reply = chat(llamacpp.url, max_tokens=60, headers={"X-Sim-Fault": "error_event=20"})
    assert "error" in reply.events[-1] and "[DONE]" not in reply.events


@pytest.mark.processes
def test_every_flavor_streams_the_same_text(sim, vllm, llamacpp):
    texts = {chat(s.url, chat_payload(max_tokens=50)).text for s in (sim, vllm, llamacpp)}
    assert len(texts) == 1


@pytest.mark.processes
def test_llamacpp_too_long_error_shape(llamacpp):
    reply = chat(llamacpp.url, max_tokens=8, headers={"X-Sim-Fault": "too_long"})
    assert reply.status == 400 and reply.body["error"]["type"] == "exceed_context_size_error"


@pytest.mark.processes
def test_every_flavor_streams_the_same_tool_calls_in_its_own_shape(sim, vllm, llamacpp):
    payload = chat_payload("Label issue 7 with the tools.", max_tokens=512, tools=list(tools()),
                           tool_choice="required")
    servers = {"sglang": sim, "vllm": vllm, "llamacpp": llamacpp}
    replies = {name: chat(server.url, payload) for name, server in servers.items()}
    assert len({str(r.tool_calls) for r in replies.values()}) == 1 and replies["sglang"].tool_calls
    first = {name: r.tool_deltas[0] for name, r in replies.items()}
    assert list(first["sglang"]) == ["id", "index", "type", "function"]
    assert "arguments" not in first["vllm"]["function"] and "id" not in replies["vllm"].tool_deltas[1]
    assert list(first["llamacpp"]) == ["index", "id", "type", "function"]
    for reply in replies.values():
        summary = parse_stream([reply.body_bytes], [0.0])
        assert summary.finish_reason == "tool_calls" and summary.chunks == len(reply.tool_deltas)
