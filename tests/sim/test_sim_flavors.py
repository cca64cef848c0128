"""`--flavor vllm|llamacpp` switch the chunk shapes and the /metrics names to those servers' own."""

from __future__ import annotations

import pytest
from sim_http import chat, chat_payload, request

from loadlib.scenarios.corpus import tools
from loadlib.sim.metrics import PAGES
from loadlib.sim.process import start_simulator
from loadlib.sim.wire import SHAPES
from loadlib.truth.probe import probe_server
from loadlib.truth.scrape import parse_metrics
from loadlib.wire.flavours import FLAVOURS
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


def counters(url: str) -> dict[str, float]:
    """Every sample of the server's /metrics, summed over its labels."""
    _families, samples = parse_metrics(request(url, "GET", "/metrics").body.decode())
    totals: dict[str, float] = {}
    for name, _labels, value in samples:
        totals[name] = totals.get(name, 0.0) + value
    return totals


def names_read(flavour) -> set[str]:
    """The metrics the server view reads first for each figure (a gauge only where no counter)."""
    m = flavour.metrics
    accept = m.accept_counters or (m.accept_gauge,)
    cache = (m.cache_counters[0] if m.cache_counters else m.cache_parts) or (m.cache_gauge,)
    return {n for n in (*accept, *cache, m.running, m.queued, m.requests, m.generated) if n}


def test_every_flavor_has_a_metrics_page():
    assert set(PAGES) == set(SHAPES)


@pytest.mark.processes
def test_each_flavor_exports_the_metrics_its_flavour_reads(sim, vllm, llamacpp):
    for name, server in {"sglang": sim, "vllm": vllm, "llamacpp": llamacpp}.items():
        page = counters(server.url)
        prefix = FLAVOURS[name].metrics.prefix
        assert names_read(FLAVOURS[name]) <= set(page), name
        assert not [n for n in page if ":" in n and not n.startswith((prefix, "loadlib_sim:"))], name


@pytest.mark.processes
def test_llamacpp_counts_cached_and_computed_prompt_tokens_apart_and_its_drafts(llamacpp):
    prompt = "Write a Python function that merges two sorted lists."
    chat(llamacpp.url, chat_payload(prompt, max_tokens=200))
    before = counters(llamacpp.url)
    reply = chat(llamacpp.url, chat_payload(prompt, max_tokens=200))
    after = counters(llamacpp.url)
    grew = {name: after[name] - before.get(name, 0.0) for name in after}
    assert grew["llamacpp:tokens_predicted_total"] == 200 == reply.usage["completion_tokens"]
    prompt_tokens = grew["llamacpp:prompt_tokens_cached_total"] + grew["llamacpp:prompt_tokens_total"]
    assert prompt_tokens == reply.usage["prompt_tokens"]
    assert grew["llamacpp:prompt_tokens_cached_total"] > prompt_tokens / 2  # the same prompt again
    drafts, accepted = grew["llamacpp:spec_decode_num_drafts_total"], grew["llamacpp:spec_decode_num_accepted_tokens_total"]
    assert 1 < 1 + accepted / drafts <= 8  # tokens per verify step, as the server view computes it
    assert grew["llamacpp:spec_decode_num_draft_tokens_total"] == 7 * drafts  # 8 draft tokens a step, 1 sampled


@pytest.mark.processes
def test_vllm_counts_tokens_as_they_are_made_and_requests_when_they_finish(vllm):
    before = counters(vllm.url)
    reply = chat(vllm.url, max_tokens=120)
    after = counters(vllm.url)
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 120
    assert after["vllm:request_success_total"] - before["vllm:request_success_total"] == 1
    queried = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
    assert queried == reply.usage["prompt_tokens"]


@pytest.mark.processes
def test_the_probe_names_each_flavour_from_its_own_info_endpoint(sim, vllm, llamacpp):
    own = {"sglang": "/get_server_info", "vllm": "/version", "llamacpp": "/props"}
    for name, server in {"sglang": sim, "vllm": vllm, "llamacpp": llamacpp}.items():
        summary, bodies = probe_server(server.url)
        assert summary["kind"] == FLAVOURS[name].probes.kind, name
        assert summary["endpoints"][own[name]] == "ok" and summary["version"], name
        assert [path for path in own.values() if path in bodies] == [own[name]], name  # the others: 404
        assert bodies["/v1/models"]["data"][0]["owned_by"] == FLAVOURS[name].probes.owned_by
    summary, _bodies = probe_server(llamacpp.url)  # llama-server's slots and context, as the manifest keeps them
    assert (summary["launch"]["total_slots"], summary["launch"]["n_ctx"]) == (2, 262144)
    assert request(vllm.url, "POST", "/flush_cache").status == 404  # SGLang's own side endpoints are SGLang's
