"""The engine's behaviour seen through real HTTP: batching bound, queueing, radix cache, speed
of acceptance by content, time scaling. Timestamps come from the simulator's own trace."""

from __future__ import annotations

import json
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from sim_http import chat, chat_payload, metric, read_trace, request

from loadlib.scenarios.thread import PROTOCOL_PROMPTS, different_prompts
from loadlib.sim.process import start_simulator


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    path = tmp_path_factory.mktemp("sim") / "trace.jsonl"
    with start_simulator(["--time-scale", "0.05", "--max-running-requests", "2",
                          "--trace", str(path)]) as proc:
        yield proc, path


@pytest.mark.processes
def test_at_most_max_running_requests_decode_at_once_and_the_rest_queue(traced):
    sim, path = traced
    ids = [f"batch-{uuid.uuid4().hex[:8]}" for _ in range(5)]
    with ThreadPoolExecutor(5) as pool:
        replies = list(pool.map(lambda rid: chat(sim.url, max_tokens=48, headers={"X-Request-Id": rid}), ids))
    assert all(r.usage["completion_tokens"] == 48 for r in replies)
    trace = read_trace(path, *ids)
    spans = sorted((trace[i]["first_token_at"], trace[i]["done_at"]) for i in ids)
    for start, _ in spans:
        assert sum(1 for s, e in spans if s <= start < e) <= 2
    assert spans[2][0] >= min(spans[0][1], spans[1][1])  # the third waited for a free slot


@pytest.mark.processes
def test_trace_records_each_request(traced):
    sim, path = traced
    reply = chat(sim.url, max_tokens=30, headers={"X-Request-Id": "trace-one"})
    record = read_trace(path, "trace-one")["trace-one"]
    assert record["completion_tokens"] == 30 == reply.usage["completion_tokens"]
    assert record["prompt_tokens"] == reply.usage["prompt_tokens"]
    assert record["chunks"] == len(reply.token_chunks)
    assert record["received_at"] < record["first_token_at"] <= record["last_token_at"] <= record["done_at"]


@pytest.mark.processes
def test_identical_prompt_hits_the_radix_cache(traced):
    sim, _ = traced
    prompt = f"Explain request {uuid.uuid4().hex} in detail."
    cold = chat(sim.url, prompt=prompt, max_tokens=8).usage
    warm = chat(sim.url, prompt=prompt, max_tokens=8).usage
    assert cold["prompt_tokens_details"]["cached_tokens"] < 10
    assert warm["prompt_tokens_details"]["cached_tokens"] == warm["prompt_tokens"] - 1


@pytest.mark.processes
def test_code_accepts_more_tokens_per_chunk_than_prose(traced):
    sim, _ = traced
    per_chunk = {}
    for name in ("code", "en_tech", "cn_chat", "cn_essay"):
        reply = chat(sim.url, prompt=PROTOCOL_PROMPTS[name], max_tokens=512)
        per_chunk[name] = reply.usage["completion_tokens"] / len(reply.token_chunks)
    assert per_chunk["code"] > per_chunk["en_tech"] > per_chunk["cn_chat"] > per_chunk["cn_essay"] > 1
    assert per_chunk["code"] > 5 and per_chunk["cn_essay"] < 2.2


@pytest.mark.processes
def test_time_scale_shrinks_simulated_durations(tmp_path):
    # 0.2 x (prefill ~0.13 s + 15 verify steps x ~26 ms) ~ 0.1 s; bounds are deliberately loose.
    path = tmp_path / "trace.jsonl"
    with start_simulator(["--time-scale", "0.2", "--trace", str(path)]) as sim:
        chat(sim.url, max_tokens=90, headers={"X-Request-Id": "scaled"})
    record = read_trace(path, "scaled")["scaled"]
    steps = record["chunks"] - 1
    decode = record["done_at"] - record["first_token_at"]
    assert 0.5 * 0.2 * 0.0259 * steps < decode < 3 * 0.2 * 0.0259 * steps


@pytest.mark.processes
def test_long_prompts_are_prefilled_in_chunks_of_chunked_prefill_size(traced):
    sim, _ = traced
    steps = lambda: metric(request(sim.url, "GET", "/metrics").body.decode(), "loadlib_sim:prefill_steps_total")
    before = steps()
    reply = chat(sim.url, prompt=f"Notes {uuid.uuid4().hex}:" + " lorem" * 5000, max_tokens=2)
    assert 5000 < reply.usage["prompt_tokens"] <= 6144
    assert steps() - before == 3  # 2048 + 2048 + the rest



@pytest.mark.processes
def test_stream_interval_merges_verify_steps_into_one_chunk():
    with start_simulator(["--time-scale", "0.02", "--stream-interval", "4"]) as sim:
        merged = chat(sim.url, max_tokens=512)
        info = request(sim.url, "GET", "/server_info").body
    with start_simulator(["--time-scale", "0.02"]) as sim:
        plain = chat(sim.url, max_tokens=512)
    assert merged.text == plain.text and info["stream_interval"] == 4
    assert 3 < (len(plain.token_chunks) - 1) / (len(merged.token_chunks) - 1) <= 4
    assert 1 < info["internal_states"][0]["avg_spec_accept_length"] <= 8  # per step, unchanged


@pytest.mark.processes
def test_a_client_that_hangs_up_while_queued_is_aborted(traced):
    sim, _ = traced
    aborted = lambda: metric(request(sim.url, "GET", "/metrics").body.decode(), "sglang:num_aborted_requests_total")
    before = aborted()
    host, port = sim.url.rsplit("/", 1)[1].split(":")
    body = json.dumps(chat_payload(max_tokens=64)).encode()
    with ThreadPoolExecutor(2) as pool:
        busy = [pool.submit(chat, sim.url, max_tokens=1024) for _ in range(2)]
        for _ in range(200):
            if metric(request(sim.url, "GET", "/metrics").body.decode(), "sglang:num_running_reqs") == 2:
                break
            time.sleep(0.005)
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b"
                         % (len(body), body))
            time.sleep(0.05)
        for _ in range(200):
            if aborted() > before:
                break
            time.sleep(0.01)
        assert [f.result().usage["completion_tokens"] for f in busy] == [1024, 1024]
    assert aborted() == before + 1


def round_aggregate(url: str, path, prompts: list[str]) -> float:
    """One round of the protocol's N streams, its aggregate from the simulator's own trace:
    Σ(comp - 1) / the longest decode (first token to last byte)."""
    ids = [f"round-{uuid.uuid4().hex[:8]}" for _ in prompts]
    with ThreadPoolExecutor(len(prompts)) as pool:
        list(pool.map(lambda job: chat(url, chat_payload(PROTOCOL_PROMPTS[job[1]], max_tokens=512),
                                       headers={"X-Request-Id": job[0]}), zip(ids, prompts)))
    trace = read_trace(path, *ids)
    return (sum(trace[i]["completion_tokens"] - 1 for i in ids)
            / max(trace[i]["done_at"] - trace[i]["first_token_at"] for i in ids))


@pytest.mark.processes
def test_the_same_prompt_beats_different_prompts_at_every_concurrency(tmp_path):
    # As in every table of the thread: identical drafts keep the same prompt's streams in lock step,
    # while different prompts wait for the one the draft predicts worst (code_b, C++, accepts less).
    path = tmp_path / "trace.jsonl"
    with start_simulator(["--time-scale", "0.1", "--max-running-requests", "8", "--trace", str(path)]) as sim:
        for n in (2, 4, 8):  # two rounds of each, alternated: a busy machine slows a round, not a kind
            same = different = 0.0
            for _ in range(2):
                same += round_aggregate(sim.url, path, ["code"] * n)
                different += round_aggregate(sim.url, path, different_prompts(n))
            assert same > different * 1.015, (n, same, different)
        code, code_b = (chat(sim.url, chat_payload(PROTOCOL_PROMPTS[name], max_tokens=512)) for name in ("code", "code_b"))
        assert 512 / len(code.token_chunks) > 512 / len(code_b.token_chunks) * 1.05  # tok/chunk
