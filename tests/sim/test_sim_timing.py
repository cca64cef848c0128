"""When things happen on the simulator's clock: the trace's arrival times, and what a prefill
costs the requests already decoding. Measured through real sockets on loopback."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from sim_http import chat_payload, read_trace

from loadlib.scenarios.thread import PROTOCOL_PROMPTS
from loadlib.sim.presets import DEFAULT_PRESET, PRESETS
from loadlib.sim.process import start_simulator

PRESET = PRESETS[DEFAULT_PRESET]


def _raw_request(rid: str, body: bytes) -> tuple[bytes, bytes]:
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
            f"X-Request-Id: {rid}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    return head, body


def _read_to_end(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"0\r\n\r\n"):
        piece = sock.recv(65536)
        if not piece:
            break
        data += piece
    return data


@pytest.mark.processes
def test_received_at_is_when_the_bytes_arrived_even_when_many_arrive_at_once(tmp_path):
    # 32 requests with 5,000-word prompts land together; parsing and tokenizing each takes the
    # simulator a millisecond or more, so the last ones are parsed tens of ms after arrival.
    path = tmp_path / "trace.jsonl"
    with start_simulator(["--time-scale", "0.002", "--max-running-requests", "32",
                          "--trace", str(path)]) as sim:
        host, port = sim.url.rsplit("/", 1)[1].split(":")
        ids = [f"burst-{i}" for i in range(32)]
        raws = [b"".join(_raw_request(rid, json.dumps(chat_payload(
            prompt=f"Notes {rid}:" + " lorem" * 5000, max_tokens=2)).encode())) for rid in ids]
        socks = [socket.create_connection((host, int(port))) for _ in ids]
        sent_at = []
        for sock, raw in zip(socks, raws):
            sent_at.append(time.time())
            sock.sendall(raw)
        for sock in socks:
            _read_to_end(sock)
            sock.close()
        trace = read_trace(path, *ids)
    late = [trace[rid]["received_at"] - at for rid, at in zip(ids, sent_at)]
    assert -0.001 < min(late) and max(late) < 0.005, late


@pytest.mark.processes
def test_received_at_is_the_first_byte_of_a_request_sent_in_two_writes(tmp_path):
    path = tmp_path / "trace.jsonl"
    with start_simulator(["--time-scale", "0.02", "--trace", str(path)]) as sim:
        host, port = sim.url.rsplit("/", 1)[1].split(":")
        head, body = _raw_request("split-1", json.dumps(chat_payload(max_tokens=4)).encode())
        with socket.create_connection((host, int(port))) as sock:
            head_at = time.time()
            sock.sendall(head)
            time.sleep(0.2)
            body_at = time.time()
            sock.sendall(body)
            _read_to_end(sock)
        record = read_trace(path, "split-1")["split-1"]
    assert head_at - 0.001 < record["received_at"] < head_at + 0.02 < body_at


def _chunk_gaps(url: str, payload: dict) -> tuple[list[float], float]:
    """Client-side arrival gaps between token chunks, and the TTFT (s)."""
    host, port = url.rsplit("/", 1)[1].split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = time.monotonic()
        sock.sendall(b"".join(_raw_request("gaps", json.dumps(payload).encode())))
        arrivals, data = [], b""
        while not data.endswith(b"0\r\n\r\n"):
            piece = sock.recv(65536)
            if not piece:
                break
            data += piece
            arrivals += [time.monotonic()] * piece.count(b'"content":"')
    return [b - a for a, b in zip(arrivals, arrivals[1:])], arrivals[0] - sent


@pytest.mark.processes
def test_a_new_request_stalls_running_decodes_by_one_prefill_forward_not_its_ttft():
    # A's decode is under way when B arrives: B's front-end latency (tokenizer, IPC) overlaps
    # A's decoding; only B's prefill forward pauses it, once, for about one step.
    with start_simulator(["--time-scale", "1"]) as sim:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(_chunk_gaps, sim.url, chat_payload(max_tokens=160))  # ~0.8 s
            time.sleep(0.35)
            gaps_b, ttft_b = _chunk_gaps(sim.url, chat_payload(PROTOCOL_PROMPTS["cn_chat"], max_tokens=16))
            gaps_a, _ = first.result()
    step = PRESET.verify_step_s + PRESET.verify_extra_req_s
    assert PRESET.frontend_s > 2 * PRESET.prefill_step_s
    assert ttft_b > PRESET.frontend_s + PRESET.prefill_step_s
    assert max(gaps_a) < step + PRESET.prefill_step_s + 0.045 < step + PRESET.frontend_s
