"""The simulator speaks SGLang's OpenAI-compatible wire format over real HTTP on loopback."""

from __future__ import annotations

import http.client
import re
from urllib.parse import urlsplit

import pytest

from sim_http import chat, chat_payload, request

from loadlib.scenarios.thread import PROTOCOL_PROMPTS
from loadlib.sim.process import start_simulator

DELTA_KEYS = ["role", "content", "reasoning_content", "tool_calls"]
CHOICE_KEYS = ["index", "delta", "logprobs", "finish_reason", "matched_stop"]
CHUNK_KEYS = ["id", "object", "created", "model", "choices", "usage"]


@pytest.mark.processes
def test_stream_has_sglang_chunk_shapes_in_order(sim):
    reply = chat(sim.url, max_tokens=40)
    assert reply.status == 200
    assert reply.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert reply.headers["transfer-encoding"] == "chunked"
    role, *middle, finish, usage, done = reply.events
    for event in (role, *middle, finish):
        assert list(event) == CHUNK_KEYS and event["object"] == "chat.completion.chunk"
        assert event["usage"] is None
        assert list(event["choices"][0]) == CHOICE_KEYS
        assert list(event["choices"][0]["delta"]) == DELTA_KEYS
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": "",
                                           "reasoning_content": None, "tool_calls": None}
    assert all(e["choices"][0]["delta"]["role"] is None and e["choices"][0]["delta"]["content"]
               and e["choices"][0]["finish_reason"] is None for e in middle)
    assert finish["choices"][0]["delta"] == dict.fromkeys(DELTA_KEYS)
    assert finish["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and done == "[DONE]"


@pytest.mark.processes
def test_usage_chunk_counts_tokens_and_several_tokens_per_chunk(sim):
    reply = chat(sim.url, max_tokens=100)
    usage = reply.usage
    assert usage["completion_tokens"] == 100
    assert usage["total_tokens"] == usage["prompt_tokens"] + 100
    assert "cached_tokens" in usage["prompt_tokens_details"]  # the preset enables cache reports
    chunks = len(reply.token_chunks)
    assert 100 / 8 <= chunks < 100 / 2  # code accepts several tokens per verify step


@pytest.mark.processes
def test_without_include_usage_there_is_no_usage_chunk(sim):
    reply = chat(sim.url, chat_payload(max_tokens=10, stream_options=None))
    assert reply.usage is None and reply.events[-1] == "[DONE]"


@pytest.mark.processes
def test_request_id_header_is_echoed_as_id_and_header(sim):
    reply = chat(sim.url, max_tokens=8, headers={"X-Request-Id": "req-42"})
    assert reply.headers["x-request-id"] == "req-42"
    assert {e["id"] for e in reply.events if isinstance(e, dict)} == {"req-42"}


@pytest.mark.processes
def test_identical_prompts_at_temperature_zero_give_identical_streams(sim):
    first, second = chat(sim.url, max_tokens=80), chat(sim.url, max_tokens=80)
    assert first.token_chunks == second.token_chunks
    other = chat(sim.url, prompt=PROTOCOL_PROMPTS["code_b"], max_tokens=80)
    assert other.text != first.text


@pytest.mark.processes
def test_output_looks_like_the_prompts_domain(sim):
    code = chat(sim.url, prompt=PROTOCOL_PROMPTS["code"], max_tokens=120).text
    essay = chat(sim.url, prompt=PROTOCOL_PROMPTS["cn_essay"], max_tokens=120).text
    assert re.search(r"\b(def|class|return|self)\b|[{}();]", code)
    assert len(re.findall(r"[\u4e00-\u9fff]", essay)) > 40


@pytest.mark.processes
def test_thinking_sends_reasoning_content_before_the_answer(sim):
    reply = chat(sim.url, max_tokens=1024, thinking=True)
    kinds = ["r" if d.get("reasoning_content") else "c" for d in reply.token_chunks]
    assert kinds[0] == "r" and "c" in kinds
    assert "".join(kinds).find("c") > "".join(kinds).rfind("r")
    assert reply.usage["reasoning_tokens"] > 0


@pytest.mark.processes
def test_without_enable_thinking_the_presets_chat_template_decides_and_qwen3_thinks(sim):
    """The thread's script sends no chat_template_kwargs: a Qwen3 server thinks then, as it does
    when asked to, and not when told enable_thinking false."""
    bare = chat_payload(max_tokens=1024)
    del bare["chat_template_kwargs"]
    unsent = chat(sim.url, payload=bare)
    asked = chat(sim.url, max_tokens=1024, thinking=True)
    assert unsent.usage["reasoning_tokens"] == asked.usage["reasoning_tokens"] > 0
    assert unsent.reasoning == asked.reasoning
    assert not chat(sim.url, max_tokens=1024, thinking=False).reasoning


@pytest.mark.processes
def test_protocol_prompts_run_until_max_tokens(sim):
    for name in ("code", "cn_essay"):
        reply = chat(sim.url, prompt=PROTOCOL_PROMPTS[name], max_tokens=1024)
        assert reply.usage["completion_tokens"] == 1024
        assert reply.events[-3]["choices"][0]["finish_reason"] == "length"


@pytest.mark.processes
def test_natural_end_finishes_with_stop_and_eos(sim):
    reply = chat(sim.url, max_tokens=500, headers={"X-Sim-Natural-Tokens": "30"})
    finish = reply.events[-3]["choices"][0]
    assert finish["finish_reason"] == "stop" and finish["matched_stop"] == 151645
    assert reply.usage["completion_tokens"] == 30


@pytest.mark.processes
def test_non_streaming_response(sim):
    reply = chat(sim.url, chat_payload(max_tokens=16, stream=False))
    body = reply.body
    assert reply.status == 200 and body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant" and message["content"]
    assert body["usage"]["completion_tokens"] == 16 and body["choices"][0]["finish_reason"] == "length"
    streamed = chat(sim.url, max_tokens=16)
    assert streamed.text == message["content"]


@pytest.mark.processes
def test_models_health_and_unknown_paths(sim):
    models = request(sim.url, "GET", "/v1/models")
    assert models.status == 200 and models.body["data"][0]["object"] == "model"
    assert request(sim.url, "GET", "/health").status == 200
    assert request(sim.url, "GET", "/nope").status == 404


@pytest.mark.processes
def test_too_long_prompt_gets_sglangs_flat_400(sim):
    reply = chat(sim.url, chat_payload(prompt="word " * 300_000, max_tokens=8))
    assert reply.status == 400
    assert reply.body["object"] == "error" and reply.body["code"] == 400
    assert "longer than the model's context length" in reply.body["message"]


@pytest.mark.processes
def test_bad_json_is_a_400_not_a_crash(sim):
    parts = urlsplit(sim.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.request("POST", "/v1/chat/completions", body=b"{not json")
    assert conn.getresponse().status == 400
    conn.close()
    assert chat(sim.url, max_tokens=4).status == 200


@pytest.mark.processes
def test_keep_alive_serves_several_requests_on_one_connection(sim):
    parts = urlsplit(sim.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    replies = [request(sim.url, "POST", "/v1/chat/completions", chat_payload(max_tokens=12), conn=conn)
               for _ in range(3)]
    assert [r.usage["completion_tokens"] for r in replies] == [12, 12, 12]
    conn.close()


@pytest.mark.processes
def test_cache_report_can_be_switched_off():
    with start_simulator(["--time-scale", "0.02", "--no-enable-cache-report"]) as quiet:
        assert chat(quiet.url, max_tokens=4).usage["prompt_tokens_details"] is None


@pytest.mark.processes
def test_image_parts_count_as_prompt_tokens(sim):
    content = [{"type": "text", "text": "What is in this picture?"},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]
    payload = chat_payload(max_tokens=8)
    payload["messages"] = [{"role": "user", "content": content}]
    reply = chat(sim.url, payload)
    assert reply.status == 200 and reply.usage["prompt_tokens"] > 500
