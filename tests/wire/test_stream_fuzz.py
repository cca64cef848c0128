"""No payload can break a request: crafted byte streams through real HTTP on loopback.

A small gevent server answers each request with the script named by its `X-Request-Id`: the
exact bytes to write, split into TCP writes, then keep the connection or close it. Every request
must give exactly one record from `ChatClient.stream`, never an exception, never a hang (the
client's timeout is 2 s), and never the client's own safety net ("client error: ..."), which
would mean a payload reached a bug.
"""

from __future__ import annotations

import json
import random
import socket
from dataclasses import dataclass

import gevent
import pytest
from gevent.server import StreamServer

from loadlib.figures.live import LiveCounters
from loadlib.wire.client import ChatClient, ChatSettings
from loadlib.wire.sse import parse_stream

SEED = 20240611
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "stream": True}
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
CLOSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


@dataclass
class Script:
    """What the server writes for one request: `raw` in `writes` pieces (random cut points),
    then closes the connection if `close`."""

    raw: bytes
    writes: int = 1
    close: bool = False


def chunked(events: list[bytes]) -> bytes:
    """SSE events, one HTTP chunk each (as SGLang flushes them), and the last chunk."""
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def event(payload: object) -> bytes:
    """A `data:` line; JSON by the standard library, which also writes lone surrogates."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return b"data: " + data + b"\n\n"


def token(text: str) -> bytes:
    return event({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})


USAGE = event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}})
DONE = b"data: [DONE]\n\n"
ANSWER = [token("Hel"), token("lo, "), token("world"), USAGE, DONE]


def stream(*events: bytes) -> bytes:
    return SSE_HEAD + chunked(list(events))


class FuzzServer:
    """Serves `scripts[request id]` on loopback, request after request on a connection."""

    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.rng = random.Random(SEED)
        self.server = StreamServer(("127.0.0.1", 0), self._handle)
        self.server.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def _handle(self, sock: socket.socket, _addr: object) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                more = sock.recv(65536)
                if not more:
                    return
                buffer += more
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
            length = int(fields.get(b"Content-Length", b"0"))
            while len(buffer) < length:
                buffer += sock.recv(65536)
            buffer = buffer[length:]
            script = self.scripts[fields[b"X-Request-Id"].decode()]
            cuts = sorted(self.rng.sample(range(1, len(script.raw)),
                                          max(min(script.writes, len(script.raw)) - 1, 0)))
            for start, end in zip([0, *cuts], [*cuts, len(script.raw)]):
                sock.sendall(script.raw[start:end])
                gevent.sleep(0.001 if self.rng.random() < 0.05 else 0)
            if script.close:
                sock.close()
                return

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def fuzz():
    server = FuzzServer()
    counters = LiveCounters()
    client = ChatClient(server.url, ChatSettings(model="m", timeout_s=2.0), live_counters=counters)
    sent = []

    def send(script: Script):
        """Sends one request answered by `script`; returns its record."""
        request_id = f"r{len(sent)}"
        server.scripts[request_id] = script
        with gevent.Timeout(10, AssertionError(f"request {request_id} hung")):
            record = client.stream(BODY, request_id)
        sent.append(record)
        assert not (record.error or "").startswith("client error"), record.error
        return record

    yield send
    client.close()
    server.stop()
    assert counters.in_flight == 0 and counters.finished == len(sent)  # one end per request


def test_a_valid_answer_in_random_tcp_writes_is_read_exactly(fuzz):
    reference = parse_stream(ANSWER, [0.0] * len(ANSWER))
    for writes in (1, 2, 3, 5, 8, 13, 40, 120, 400):
        for _ in range(6):
            record = fuzz(Script(stream(*ANSWER), writes=writes))
            assert record.error is None
            assert (record.chunks, record.completion_tokens, record.finish_reason) == (3, 3, None)
            assert record.output_sha == reference.output_sha
            assert record.first_read_events >= 1 and 0 < record.ttft_s <= record.total_s


@pytest.mark.parametrize("payload, reason", [
    ({"choices": [1]}, "malformed event: choices[0] is not an object"),
    ({"choices": [{"index": 0, "delta": {"content": "a"}}, "x"]}, "malformed event: choices[1] is not an object"),
    ({"choices": [{"delta": "x"}]}, "malformed event: delta is not an object"),
    ({"choices": [{"delta": {"content": 5}}]}, "malformed event: delta.content is not a string"),
    ({"choices": [{"delta": {"reasoning_content": ["a"]}}]}, "malformed event: delta.reasoning_content is not a string"),
    ({"choices": [{"delta": {"tool_calls": "x"}}]}, "malformed event: delta.tool_calls is not a list"),
    ({"choices": [{"delta": {"tool_calls": [1]}}]}, "malformed event: delta.tool_calls[0] is not an object"),
    ({"choices": [{"delta": {"tool_calls": [{"function": "f"}]}}]},
     "malformed event: delta.tool_calls[0].function is not an object"),
    ({"choices": [{"delta": {"tool_calls": [{"function": {"name": 5}}]}}]},
     "malformed event: delta.tool_calls[0].function.name is not a string"),
    ({"choices": [{"delta": {}, "finish_reason": 5}]}, "malformed event: finish_reason is not a string"),
    ({"choices": "x"}, "malformed event: choices is not a list"),
    ({"choices": [], "usage": 5}, "malformed event: usage is not an object"),
    ([1, 2], "malformed event: not an object"),
    (5, "malformed event: not an object"),
    ("x", "malformed event: not an object"),
    (None, "malformed event: not an object"),
    ({"error": 5}, "stream error: 5"),
    ({"error": [1, {"message": 2}]}, "stream error: [1, {'message': 2}]"),
    (b"[" * 5000 + b"]" * 5000, "malformed JSON in stream"),
    (b'{"choices":[{"delta":{"content":"\xff\xfe"}}]}', "invalid UTF-8 in stream"),
])
def test_a_wrong_shaped_event_fails_its_request_with_a_reason_naming_it(fuzz, payload, reason):
    record = fuzz(Script(stream(token("a"), event(payload), token("b"), USAGE, DONE), writes=3))
    assert record.error == reason
    assert record.http_status == 200


def test_wrong_types_in_usage_are_read_as_not_reported(fuzz):
    usage = event({"choices": [], "usage": {"prompt_tokens": "5", "completion_tokens": True,
                                            "prompt_tokens_details": 7}})
    record = fuzz(Script(stream(token("a"), token("b"), usage, DONE)))
    assert record.error == "completion_tokens <= 1"
    assert (record.completion_tokens, record.prompt_tokens, record.cached_tokens) == (None, None, None)


def _random_json(rng: random.Random, depth: int = 0) -> object:
    """A JSON value drawn from the shapes a chunk has, right and wrong, nested a few levels."""
    keys = ["choices", "delta", "content", "reasoning_content", "reasoning", "tool_calls", "function",
            "name", "arguments", "usage", "completion_tokens", "finish_reason", "error", "index", "x"]
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([0, 1, -1, 2**70, 1.5, True, False])
    if kind in (2, 3):
        return rng.choice(["", "a", "é漢", "\ud800", "[DONE]", "data: x\n\n"])
    if kind == 4:
        return rng.choice([[], {}])
    if kind == 5:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randrange(1, 4))}


def test_random_events_in_random_writes_each_give_one_record(fuzz):
    rng = random.Random(SEED)
    for _ in range(150):
        events = [event(_random_json(rng)) for _ in range(rng.randrange(1, 6))]
        if rng.random() < 0.5:
            events.insert(rng.randrange(len(events) + 1), token("ok"))
        if rng.random() < 0.2:  # bytes, not JSON: random garbage lines
            events.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) + b"\n")
        events += [USAGE, DONE] if rng.random() < 0.7 else []
        record = fuzz(Script(stream(*events), writes=rng.randrange(1, 12)))
        assert record.error is None or isinstance(record.error, str)


def test_empty_data_lines_and_comments_are_skipped(fuzz):
    noise = [b"data:\n\n", b"data: \n\n", b"data:\r\n\r\n", b": keep-alive\n\n", b"event: x\nid: 3\n\n"]
    record = fuzz(Script(stream(noise[0], token("a"), *noise[1:], token("b"), USAGE, DONE), writes=7))
    assert record.error is None and record.chunks == 2


def test_a_1_mb_line_is_read_and_a_longer_one_fails_with_its_reason(fuzz):
    big = token("x" * 1_000_000)
    record = fuzz(Script(stream(big, token("y"), USAGE, DONE), writes=50))
    assert record.error is None and record.chunks == 2
    huge = token("x" * 1_100_000)
    record = fuzz(Script(stream(token("a"), huge, token("y"), USAGE, DONE), writes=50))
    assert record.error == "SSE line over 1 MiB" and record.chunks == 2


def test_a_stream_cut_at_every_offset_fails_cleanly(fuzz):
    chunked_raw, close_raw = stream(*ANSWER), CLOSE_HEAD + b"".join(ANSWER)
    for raw, complete_at in ((chunked_raw, len(chunked_raw)), (close_raw, len(close_raw) - 1)):
        for cut in range(len(raw)):  # a close-delimited body is whole once its `[DONE]` line is
            record = fuzz(Script(raw[:cut], writes=2 if cut > 1 else 1, close=True))
            assert bool(record.error) == (cut < complete_at), (cut, record.error)


def test_a_200_that_is_no_event_stream_names_its_type_and_first_bytes(fuzz):
    page = b"<html><head><title>Sign in</title></head><body>" + b"x" * 5000 + b"</body></html>"
    login = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s" % (len(page), page)
    record = fuzz(Script(login))
    assert record.error == ("not an event stream: content-type text/html, body starts "
                            "'<html><head><title>Sign in</title></head><body>x'...")
    body = b'{"error": {"message": "model not loaded"}}'
    json_error = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body), body)
    record = fuzz(Script(json_error))
    assert record.error == ("not an event stream: content-type application/json, body starts "
                            "'{\"error\": {\"message\": \"model not loaded\"}}'")
    empty = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    assert fuzz(Script(empty)).error == "not an event stream: no content-type, empty body"


def test_random_corruption_of_the_framing_gives_one_record(fuzz):
    rng = random.Random(SEED)
    raw = stream(*ANSWER)
    for _ in range(300):
        broken = bytearray(raw)
        for _ in range(rng.randrange(1, 4)):
            broken[rng.randrange(len(broken))] = rng.choice(b"-0123456789abcdef\r\n;: \xff")
        record = fuzz(Script(bytes(broken), writes=rng.randrange(1, 6), close=True))
        assert record.error is None or isinstance(record.error, str)
