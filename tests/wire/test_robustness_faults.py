"""Every fault a server or the network produces ends as one failed record with its reason.

Each fault goes through real HTTP on 127.0.0.1: the simulator's fault injection where it has
the fault, and a small purpose-built server (`FaultServer`) for the rest. After each fault the
same client sends a normal request and gets a normal record: the run goes on.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time
from typing import Callable

import gevent
import gevent.event
import orjson
import pytest
from gevent.server import StreamServer

from loadlib.records import Exchange, RequestLabel, RequestRecord
from loadlib.wire.client import ChatClient, ChatSettings, chat_body

TIMEOUT_S = 0.5  # the client's request timeout in these tests; stalls last twice as long
STALL_S = 1.0
MODEL = "fault-model"
COMPLETION_TOKENS = 24


# --- a purpose-built server ------------------------------------------------------------------

def event(content=None, reasoning=None, finish=None, role=None) -> bytes:
    """One SGLang-shaped chunk event."""
    chunk = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
             "choices": [{"index": 0, "delta": {"role": role, "content": content,
                                                 "reasoning_content": reasoning, "tool_calls": None},
                          "logprobs": None, "finish_reason": finish, "matched_stop": None}],
             "usage": None}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


USAGE = b"data: " + orjson.dumps({
    "id": "x", "object": "chat.completion.chunk", "created": 1, "model": MODEL, "choices": [],
    "usage": {"prompt_tokens": 40, "completion_tokens": COMPLETION_TOKENS, "total_tokens": 64,
              "prompt_tokens_details": {"cached_tokens": 0}}}) + b"\n\n"
DONE = b"data: [DONE]\n\n"
SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")
CONTENT = [event(content=f"tok{i} tok{i} tok{i} ") for i in range(8)]  # 8 chunks, 3 tokens each


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


LAST_CHUNK = b"0\r\n\r\n"


def json_response(status: int, reason: str, body: bytes, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s"
            % (status, reason.encode(), len(body), extra, body))


class Conn:
    """The server side of one client connection, with the moves a misbehaving server makes."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, *parts: bytes, pause: float = 0.002) -> None:
        for part in parts:
            self.sock.sendall(part)
            gevent.sleep(pause)

    def stream(self, *events: bytes) -> None:
        """A chunked SSE body, one HTTP chunk per event, ended properly."""
        self.send(SSE_HEAD, *(chunk(e) for e in events), LAST_CHUNK)

    def reset(self) -> None:
        """Closes with an RST (SO_LINGER 0) instead of a FIN."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


def normal(c: Conn) -> None:
    c.stream(event(content="", role="assistant"), *CONTENT, event(content="", finish="stop"), USAGE, DONE)


def reset_before_headers(c: Conn) -> bool:
    c.reset()
    return False


def close_before_headers(c: Conn) -> bool:
    c.sock.close()
    return False


def reset_mid_stream(c: Conn) -> bool:
    c.send(SSE_HEAD, *(chunk(e) for e in CONTENT[:3]))
    c.reset()
    return False


def close_mid_stream(c: Conn) -> bool:
    c.send(SSE_HEAD, *(chunk(e) for e in CONTENT[:3]))
    c.sock.close()
    return False


def http400_sglang_flat(c: Conn) -> None:
    c.send(json_response(400, "Bad Request", orjson.dumps({
        "object": "error", "message": "The input (9000 tokens) is longer than the model's context length (8192 tokens).",
        "type": "BadRequestError", "param": None, "code": 400})))


def http500_openai_nested(c: Conn) -> None:
    c.send(json_response(500, "Internal Server Error", orjson.dumps({"error": {
        "message": "The server had an error while processing your request.", "type": "server_error",
        "param": None, "code": None}})))


BAD_GATEWAY = (b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
               b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")


def http502_not_json(c: Conn) -> None:
    c.send(b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html\r\ncontent-length: %d\r\n\r\n%s"
           % (len(BAD_GATEWAY), BAD_GATEWAY))


def http429_retry_after(c: Conn) -> None:
    c.send(json_response(429, "Too Many Requests", orjson.dumps({"error": {
        "message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}),
        b"retry-after: 7\r\n"))


def error_event(c: Conn) -> None:  # SGLang's mid-stream error, then [DONE]
    c.stream(*CONTENT[:2], b"data: " + orjson.dumps({"error": {
        "object": "error", "message": "CUDA out of memory", "type": "InternalServerError",
        "param": None, "code": 500}}) + b"\n\n", DONE)


def malformed_json(c: Conn) -> None:
    c.stream(*CONTENT[:2], b'data: {"choices": [{"index": 0, "delta": {"content": "x"\n\n', *CONTENT[2:], USAGE, DONE)


def no_usage(c: Conn) -> None:
    c.stream(*CONTENT, event(content="", finish="stop"), DONE)


def no_done(c: Conn) -> None:
    c.stream(*CONTENT, event(content="", finish="stop"), USAGE)


def stall_before_first_chunk(c: Conn) -> bool:  # headers and the role chunk, then nothing
    c.send(SSE_HEAD, chunk(event(content="", role="assistant")))
    gevent.sleep(STALL_S)
    return False


def stall_between_chunks(c: Conn) -> bool:
    c.send(SSE_HEAD, *(chunk(e) for e in CONTENT[:3]))
    gevent.sleep(STALL_S)
    return False


def slow_headers(c: Conn) -> None:  # the head trickles in over ~0.2 s, then a normal stream
    head = SSE_HEAD
    for i in range(0, len(head), 16):
        c.send(head[i:i + 16], pause=0.015)
    c.send(*(chunk(e) for e in (*CONTENT, USAGE, DONE)), LAST_CHUNK)


def headers_never_come(c: Conn) -> bool:
    c.send(b"HTTP/1.1 200 OK\r\n")
    gevent.sleep(STALL_S)
    return False


def line_over_1_mib(c: Conn) -> None:
    c.stream(*CONTENT[:2], event(content="x" * (1 << 20) + "y"), *CONTENT[2:], USAGE, DONE)


def not_utf8(c: Conn) -> None:
    raw = b'data: {"choices": [{"index": 0, "delta": {"content": "\xff\xfe\xc3"}}]}\n\n'
    c.send(SSE_HEAD.replace(b"\r\n\r\n", b"\r\nx-junk: \xff\xfe\r\n\r\n"),
           *(chunk(e) for e in (*CONTENT[:2], raw, *CONTENT[2:], USAGE, DONE)), LAST_CHUNK)


def endless_body(c: Conn) -> bool:  # --host pointed at something that is not an LLM server
    c.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\nconnection: close\r\n\r\n")
    block = b"\0" * (1 << 20)
    for _ in range(128):
        c.sock.sendall(block)
    return False


def not_http(c: Conn) -> bool:
    c.send(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
    gevent.sleep(STALL_S)  # keeps the connection open: the client must drop it itself
    return False


def utf8_split_at_every_byte(c: Conn) -> None:
    """Chinese text whose multi-byte characters arrive split across reads: not a fault."""
    body = b"".join(chunk(e) for e in (*[event(content="你好，世界。" * 2)] * 8, USAGE, DONE)) + LAST_CHUNK
    c.send(SSE_HEAD)
    c.send(*(body[i:i + 7] for i in range(0, len(body), 7)), pause=0)


def echoes_the_api_key(c: Conn) -> None:
    auth = next((line for line in c.request_head.split(b"\r\n") if line.lower().startswith(b"authorization:")), b"")
    c.send(json_response(401, "Unauthorized", orjson.dumps({"error": {
        "message": f"Invalid API key: {auth.split()[-1].decode()}", "type": "invalid_request_error"}})))


# fault -> the failure reason its record must carry (None: a normal, successful request)
EXPECTED: dict[str, str | None] = {
    "normal": None,
    "reset_before_headers": "connection reset before headers",
    "close_before_headers": "connection closed before headers",
    "reset_mid_stream": "connection reset mid-stream",
    "close_mid_stream": "connection closed mid-stream",
    "http400_sglang_flat": "http 400: The input (9000 tokens) is longer than the model's context length (8192 tokens).",
    "http500_openai_nested": "http 500: The server had an error while processing your request.",
    "http502_not_json": "http 502: <html> <head><title>502 Bad Gateway</title></head> <body> "
                        "<center><h1>502 Bad Gateway</h1></center> <hr><center>nginx</center> </body> </html>",
    "http429_retry_after": "http 429: Rate limit reached for requests (Retry-After: 7)",
    "error_event": "stream error: CUDA out of memory",
    "malformed_json": "malformed JSON in stream",
    "no_usage": "no usage chunk",
    "no_done": "stream ended without [DONE]",
    "stall_before_first_chunk": "timeout before first token",
    "stall_between_chunks": "timeout mid-stream",
    "slow_headers": None,
    "headers_never_come": "timeout before headers",
    "line_over_1_mib": "SSE line over 1 MiB",
    "not_utf8": "invalid UTF-8 in stream",
    "endless_body": "response body over 64 MiB",
    "not_http": "not an HTTP response: 'SSH-2.0-OpenSSH_9.6'",
    "utf8_split_at_every_byte": None,
}
ACTIONS: dict[str, Callable[[Conn], bool | None]] = {name: globals()[name] for name in EXPECTED}
ACTIONS["echoes_the_api_key"] = echoes_the_api_key


class FaultServer:
    """An OpenAI-compatible streaming server on 127.0.0.1 that misbehaves on purpose.

    Each new request id (X-Request-Id) gets the next fault of `schedule` (cycled); a request
    sent again with the same id (the client's one retry on a fresh connection) gets the same
    fault. `served` maps request id -> fault. Runs in its own thread, so it also serves a
    Locust subprocess while the test waits. With `tls` (a server SSLContext) it speaks HTTPS.
    """

    def __init__(self, schedule: list[str], tls: ssl.SSLContext | None = None) -> None:
        self.schedule = schedule
        self.tls = tls
        self.served: dict[str, str] = {}
        self.hits: list[str] = []  # request ids in arrival order, retries included
        self.authorizations: list[str] = []  # Authorization header of each chat request
        self._next = 0
        self._ready = threading.Event()
        self._hub_stop: _ThreadsafeSetter | None = None
        self.port = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> "FaultServer":
        self._thread.start()
        assert self._ready.wait(10), "fault server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._hub_stop.set()
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        server = StreamServer(("127.0.0.1", 0), self._handle)
        server.start()
        self.port = server.server_port
        stop = gevent.event.Event()
        self._hub_stop = _ThreadsafeSetter(stop)
        self._ready.set()
        stop.wait()
        server.stop(timeout=1)

    def _handle(self, sock: socket.socket, _addr: object) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if self.tls is not None:  # here, so that a refused handshake is just a closed connection
                sock = self.tls.wrap_socket(sock, server_side=True)
            while True:
                request = _read_request(sock)
                if request is None:
                    return
                head, path = request
                conn = Conn(sock)
                conn.request_head = head
                if path.endswith("/v1/models"):
                    conn.send(json_response(200, "OK", orjson.dumps({"object": "list", "data": [
                        {"id": MODEL, "object": "model", "owned_by": "test"}]})))
                    continue
                action = ACTIONS[self._fault_for(head)]
                if action(conn) is False:
                    return
        except OSError:  # the client gave up first (timeouts): nothing to clean
            pass
        finally:
            try:
                sock.close()
            except OSError:
                pass

    def _fault_for(self, head: bytes) -> str:
        fields = {name.strip().lower(): value.strip() for name, _, value in
                  (line.decode("latin-1").partition(":") for line in head.split(b"\r\n")[1:])}
        rid = fields.get("x-request-id", "")
        self.hits.append(rid)
        if "authorization" in fields:
            self.authorizations.append(fields["authorization"])
        if rid not in self.served:
            self.served[rid] = self.schedule[self._next % len(self.schedule)]
            self._next += 1
        return self.served[rid]


class _ThreadsafeSetter:
    """Sets a gevent Event of another thread's hub from this thread."""

    def __init__(self, event) -> None:
        self._event = event
        self._hub = gevent.get_hub()
        self._watcher = self._hub.loop.async_()
        self._watcher.start(event.set)

    def set(self) -> None:
        self._watcher.send()


def _read_request(sock: socket.socket) -> tuple[bytes, str] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        if not more:
            return None
        data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length")), 0)
    while len(rest) < length:
        more = sock.recv(65536)
        if not more:
            return None
        rest += more
    return head, head.split(b" ", 2)[1].decode()


# --- the client's side -------------------------------------------------------------------------

def send(client: ChatClient, request_id: str) -> Exchange:
    body = chat_body(client.settings, [{"role": "user", "content": "Write a haiku about sockets."}])
    return client.stream(body, request_id)


def assert_normal(record: Exchange) -> None:
    assert record.error is None, record.error
    assert record.http_status == 200 and record.completion_tokens == COMPLETION_TOKENS
    assert 0 < record.ttft_s <= record.total_s and record.chunks == 8


@pytest.fixture
def client():
    clients = []

    def make(url: str, **settings) -> ChatClient:
        clients.append(ChatClient(url, ChatSettings(model=MODEL, timeout_s=TIMEOUT_S, **settings)))
        return clients[-1]

    yield make
    for c in clients:
        c.close()


FAULTS = [name for name, reason in EXPECTED.items() if reason is not None]


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_is_a_failed_record_with_its_reason_and_the_next_request_is_normal(fault, client):
    with FaultServer([fault, "normal"]) as server:
        c = client(server.url)
        started = time.time()
        failed = send(c, "r-fault")
        assert failed.error == EXPECTED[fault]
        assert started <= failed.sent_at <= time.time()  # a failed record is placed in time too
        assert failed.total_s is not None and failed.total_s < TIMEOUT_S + 0.5
        assert_normal(send(c, "r-next"))


def test_a_fault_on_a_reused_connection_is_retried_once_on_a_fresh_one(client):
    with FaultServer(["normal", "close_before_headers", "normal"]) as server:
        c = client(server.url)
        assert_normal(send(c, "r1"))
        assert send(c, "r2").error == "connection closed before headers"
        assert server.hits == ["r1", "r2", "r2"]  # the idle-close retry, then the genuine failure
        assert_normal(send(c, "r3"))


@pytest.mark.parametrize("fault", ["slow_headers", "utf8_split_at_every_byte"])
def test_slow_or_fragmented_delivery_is_not_a_fault(fault, client):
    with FaultServer([fault]) as server:
        record = send(client(server.url), "r1")
    assert record.error is None and record.completion_tokens == COMPLETION_TOKENS
    if fault == "slow_headers":
        assert record.ttft_s > 0.1  # TTFT counts from the send, so the slow head is in it


def test_connection_refused_is_a_failed_record(client):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    record = send(client(f"http://127.0.0.1:{port}"), "r1")
    assert record.error == f"connect to 127.0.0.1:{port}: connection refused"
    assert record.sent_at > 0 and record.http_status is None


def test_an_api_key_echoed_by_the_server_is_not_kept_in_the_reason(client):
    key = "sk-echo-7f3a9c1e5b2d"
    with FaultServer(["echoes_the_api_key"]) as server:
        record = send(client(server.url, api_key=key), "r1")
    assert record.error == "http 401: Invalid API key: ***"
    line = RequestRecord.of(RequestLabel("code", "single", "single"), record, "r1", worker=0, user=0).to_json()
    assert key not in line.decode()  # the journal's line


# --- the simulator's fault injection -----------------------------------------------------------

SIM_FAULTS = {  # X-Sim-Fault value -> how the reason starts
    "http500": "http 500: ",
    "http503": "http 503: ",
    "http429": "http 429: ",
    "too_long": "http 400: ",
    "error_event": "stream error: ",
    "drop": "connection closed mid-stream",
    "malformed": "malformed JSON in stream",
    "no_usage": "no usage chunk",
    "no_done": "stream ended without [DONE]",
    "stall_first=40": "timeout before",  # 40 s simulated = 2 s at --time-scale 0.05
    "stall=40": "timeout mid-stream",
}


@pytest.fixture(scope="module")
def sim_url():
    from loadlib.sim.process import start_simulator

    sim = start_simulator(["--time-scale", "0.05"])
    try:
        yield sim.url
    finally:
        sim.stop()


@pytest.mark.processes
@pytest.mark.parametrize("fault", list(SIM_FAULTS))
def test_simulator_fault_is_a_failed_record_and_the_next_request_is_normal(fault, sim_url, client):
    c = client(sim_url)
    c._headers["X-Sim-Fault"] = fault
    record = send(c, f"sim-{fault}")
    assert record.error is not None and record.error.startswith(SIM_FAULTS[fault]), record.error
    if fault in ("http503", "http429"):
        assert "(Retry-After: " in record.error
    del c._headers["X-Sim-Fault"]
    after = send(c, f"sim-after-{fault}")
    assert after.error is None and after.completion_tokens and after.completion_tokens > 1
