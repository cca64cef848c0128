"""Injected faults, by flag share and by the X-Sim-Fault request header."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from sim_http import chat, chat_payload, metric, read_trace, request

from loadlib.sim.faults import parse_spec
from loadlib.sim.process import start_simulator


def fault(sim, spec: str, **kw):
    return chat(sim.url, headers={"X-Sim-Fault": spec}, max_tokens=kw.pop("max_tokens", 60), **kw)


@pytest.mark.processes
@pytest.mark.parametrize("spec,status,retry", [("http500", 500, None), ("http503", 503, "1"),
                                               ("http429=7", 429, "7")])
def test_http_error_statuses(sim, spec, status, retry):
    reply = fault(sim, spec)
    assert reply.status == status
    assert reply.body["object"] == "error" and reply.body["code"] == status
    assert reply.headers.get("retry-after") == retry


@pytest.mark.processes
def test_too_long_is_sglangs_flat_400(sim):
    reply = fault(sim, "too_long")
    assert reply.status == 400 and reply.body["type"] == "BadRequestError"
    assert "longer than the model's context length" in reply.body["message"]


@pytest.mark.processes
def test_error_event_mid_stream_then_done(sim):
    reply = fault(sim, "error_event=20")
    errors = [e for e in reply.events if isinstance(e, dict) and "error" in e]
    assert len(errors) == 1 and errors[0]["error"]["code"] == 500
    assert reply.events[-1] == "[DONE]" and reply.usage is None
    assert 0 < len(reply.token_chunks) and reply.events.index(errors[0]) > 1


def raw_stream(url: str, headers: dict) -> bytes:
    """The raw response bytes until the server closes (the request asks to keep the connection)."""
    host, port = url.rsplit("/", 1)[1].split(":")
    body = json.dumps(chat_payload(max_tokens=60)).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{head}"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        data = b""
        for _ in range(10_000):
            more = sock.recv(65536)
            if not more:
                return data
            data += more
    raise AssertionError("the server never closed the connection")


@pytest.mark.processes
def test_dropped_connection_mid_stream(sim):
    data = raw_stream(sim.url, {"X-Sim-Fault": "drop=20"})
    assert data.startswith(b"HTTP/1.1 200 OK") and b'"content":"' in data
    assert b"[DONE]" not in data and not data.endswith(b"0\r\n\r\n")
    assert chat(sim.url, max_tokens=8).status == 200  # the server carries on


@pytest.mark.processes
def test_malformed_line_then_the_stream_goes_on(sim):
    reply = fault(sim, "malformed=10")
    assert len(reply.bad_lines) == 1 and reply.usage["completion_tokens"] == 60
    assert reply.events[-1] == "[DONE]"


@pytest.mark.processes
def test_no_usage_and_no_done(sim):
    no_usage = fault(sim, "no_usage")
    assert no_usage.usage is None and no_usage.events[-1] == "[DONE]"
    no_done = fault(sim, "no_done")
    assert "[DONE]" not in no_done.events and no_done.usage["completion_tokens"] == 60
    assert raw_stream(sim.url, {"X-Sim-Fault": "no_done", "Connection": "close"}).endswith(b"0\r\n\r\n")


@pytest.mark.processes
def test_count_skew_streams_every_token_but_counts_fewer(sim):
    """The stream is whole; the server's generated-token counter leaves out 10 % of it."""
    counted = lambda: metric(request(sim.url, "GET", "/metrics").body.decode(), "sglang:generation_tokens_total")
    before = counted()
    reply = fault(sim, "count_skew=0.1", max_tokens=200)
    assert reply.usage["completion_tokens"] == 200 and len(reply.text) > 0 and reply.events[-1] == "[DONE]"
    assert counted() - before == 180
    assert fault(sim, "count_skew", max_tokens=50).usage["completion_tokens"] == 50  # 10 % by default
    assert counted() - before == 180 + 45


@pytest.mark.processes
def test_cache_drop_empties_the_prefix_cache_as_the_request_arrives(sim):
    """A prompt sent again meets its prefix cached, unless the cache is dropped as it arrives;
    then it is cached again for the next."""
    prompt = "Which of the cache_drop test's prompts is cached?"
    reply = lambda **kw: chat(sim.url, prompt=prompt, max_tokens=4, **kw).usage["prompt_tokens_details"]
    cached = lambda **kw: reply(**kw)["cached_tokens"]
    cached()
    warm = cached()
    assert warm > 10  # the whole prompt, beyond the chat template's framing
    assert cached(headers={"X-Sim-Fault": "cache_drop"}) == 0
    assert cached() == warm


@pytest.mark.processes
def test_front_queue_lets_k_requests_through_at_a_time_unseen_by_the_gauges(tmp_path):
    """Four requests at once through a queue in front that admits one: the server receives each
    only when the one before has ended, and never holds more than one."""
    path = tmp_path / "trace.jsonl"
    held = []
    with start_simulator(["--time-scale", "0.05", "--trace", str(path), "--fault", "front_queue=1"]) as sim:
        senders = [threading.Thread(target=chat, args=(sim.url,), kwargs={"max_tokens": 60,
                                                                        "headers": {"X-Request-Id": f"q{i}"}})
                   for i in range(4)]
        for sender in senders:
            sender.start()
        while any(sender.is_alive() for sender in senders):
            page = request(sim.url, "GET", "/metrics").body.decode()
            held.append(metric(page, "sglang:num_running_reqs") + metric(page, "sglang:num_queue_reqs"))
        for sender in senders:
            sender.join()
    trace = sorted(read_trace(path, "q0", "q1", "q2", "q3").values(), key=lambda r: r["received_at"])
    assert all(later["received_at"] >= earlier["done_at"] for earlier, later in zip(trace, trace[1:]))
    assert max(held) == 1


@pytest.mark.processes
def test_stalls_before_first_and_later_chunks_are_traced(tmp_path):
    path = tmp_path / "trace.jsonl"
    with start_simulator(["--time-scale", "0.05", "--trace", str(path)]) as sim:
        chat(sim.url, max_tokens=60, headers={"X-Sim-Fault": "stall_first=4", "X-Request-Id": "s1"})
        chat(sim.url, max_tokens=60, headers={"X-Sim-Fault": "stall=4", "X-Request-Id": "s2"})
        chat(sim.url, max_tokens=60, headers={"X-Request-Id": "s0"})
    trace = read_trace(path, "s0", "s1", "s2")
    ttft = {k: r["first_token_at"] - r["received_at"] for k, r in trace.items()}
    decode = {k: r["done_at"] - r["first_token_at"] for k, r in trace.items()}
    assert ttft["s1"] > ttft["s0"] + 0.15  # 4 s x 0.05 = 0.2 s
    assert decode["s2"] > decode["s0"] + 0.15


@pytest.mark.processes
def test_fault_shares_from_flags_are_reproducible():
    with start_simulator(["--time-scale", "0.02", "--fault", "http503@0.5", "--fault-seed", "3"]) as sim:
        first = [chat(sim.url, max_tokens=4).status for _ in range(12)]
    with start_simulator(["--time-scale", "0.02", "--fault", "http503@0.5", "--fault-seed", "3"]) as sim:
        second = [chat(sim.url, max_tokens=4).status for _ in range(12)]
    assert first == second and set(first) == {200, 503}


def test_fault_spec_parsing():
    assert parse_spec("stall_first=2.5@0.1").value == 2.5
    with pytest.raises(ValueError, match="unknown fault"):
        parse_spec("explode")
    with pytest.raises(ValueError, match="SHARE"):
        parse_spec("drop@2")
    assert parse_spec("count_skew=0.25").value == 0.25
    with pytest.raises(ValueError, match="count_skew's VALUE is a share"):
        parse_spec("count_skew=2")
    assert parse_spec("front_queue=2").value == 2
    with pytest.raises(ValueError, match="front_queue's VALUE is a whole number"):
        parse_spec("front_queue=1.5")
