"""HTTP/1.1 framing of the lean client, against a raw socket server on loopback."""

import socket
import subprocess
import sys
import time

import gevent
import pytest
from gevent.server import StreamServer

from loadlib.wire.connection import Collector, Connection, Endpoint, TransportError


def serve(responses):
    """A server that answers each request on a connection with the next canned action.

    An action is a list of byte strings written with a short pause between them, or a
    callable taking the socket.
    """
    queue = list(responses)

    def handle(sock, _addr):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while queue:
            data = b""
            while b"\r\n\r\n" not in data:
                more = sock.recv(65536)
                if not more:
                    return
                data += more
            head, _, rest = data.partition(b"\r\n\r\n")
            length = next((int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")), 0)
            while len(rest) < length:
                rest += sock.recv(65536)
            action = queue.pop(0)
            if callable(action):
                action(sock)
                return
            for part in action:
                sock.sendall(part)
                gevent.sleep(0.002)

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server


def chunked(*payloads: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.fixture
def connect():
    servers, conns = [], []

    def make(responses, timeout=5.0):
        server = serve(responses)
        servers.append(server)
        conn = Connection(Endpoint.parse(f"http://127.0.0.1:{server.server_port}"), timeout=timeout)
        conns.append(conn)
        return conn

    yield make
    for conn in conns:
        conn.close()
    for server in servers:
        server.stop()


def test_chunked_body_split_at_every_byte_boundary_is_reassembled(connect):
    body = chunked(b"data: a\n\n", b"data: [DONE]\n\n")
    raw = HEAD + body
    conn = connect([[raw[:i], raw[i:]] for i in range(1, len(raw))])
    for _ in range(1, len(raw)):
        response = conn.request("POST", "/v1/chat/completions", b"{}")
        assert response.status == 200 and response.complete and response.error is None
        assert response.body == b"data: a\n\ndata: [DONE]\n\n"


def test_arrival_times_increase_with_each_piece(connect):
    conn = connect([[HEAD, chunked(b"data: a\n\n")[:-5], b"0\r\n\r\n"]])
    response = conn.request("GET", "/")
    assert len(response.arrivals) == 1 and response.arrivals[0] >= response.sent_at


def test_content_length_and_keep_alive_reuse(connect):
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    conn = connect([[ok], [ok]])
    assert conn.request("GET", "/a").body == b"hello"
    sock = conn._stream
    assert conn.request("GET", "/b").body == b"hello"
    assert conn._stream is sock


def test_close_delimited_body(connect):
    conn = connect([lambda s: (s.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nbye"), s.close())])
    response = conn.request("GET", "/")
    assert response.body == b"bye" and response.complete


def test_reset_mid_stream_keeps_what_arrived(connect):
    def cut(sock):
        sock.sendall(HEAD + b"9\r\ndata: a\n\n\r\n")
        gevent.sleep(0.01)
        sock.close()
    conn = connect([cut])
    response = conn.request("POST", "/", b"{}")
    assert response.error == "connection closed mid-stream"
    assert response.body == b"data: a\n\n" and not response.complete


def test_connection_refused_is_a_transport_error():
    server = StreamServer(("127.0.0.1", 0), lambda s, a: None)
    server.start()
    port = server.server_port
    server.stop()
    conn = Connection(Endpoint.parse(f"http://127.0.0.1:{port}"))
    with pytest.raises(TransportError, match="connection refused"):
        conn.request("GET", "/")


def test_stall_beyond_the_timeout_is_a_timeout_mid_stream(connect):
    conn = connect([lambda s: (s.sendall(HEAD + b"9\r\ndata: a\n\n\r\n"), gevent.sleep(1.0))], timeout=0.3)
    response = conn.request("GET", "/")
    assert response.error == "timeout mid-stream"


def test_server_closing_an_idle_keep_alive_connection_is_retried_once(connect):
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    conn = connect([lambda s: (s.sendall(ok), s.close()), [ok]])
    assert conn.request("GET", "/").body == b"ok"
    gevent.sleep(0.01)
    assert conn.request("GET", "/").body == b"ok"


def test_base_url_prefix_and_v1_suffix():
    assert Endpoint.parse("http://h:8000/v1").prefix == ""
    assert Endpoint.parse("https://h/proxy/v1/").prefix == "/proxy"
    assert Endpoint.parse("https://h").port == 443
    with pytest.raises(ValueError):
        Endpoint.parse("gpu-box:8000")


class Recorder:
    """A body reader that notes when each piece was handed over."""

    ended = False

    def __init__(self, response):
        self.pieces, self.fed_at = [], []

    def feed(self, data, t):
        self.pieces.append(data)
        self.fed_at.append(time.time())


def test_a_reader_is_fed_each_piece_as_it_arrives_not_at_the_end(connect):
    conn = connect([[HEAD, chunked(b"data: a\n\n")[:-5], b"", b"", b""] + [b""] * 20 + [b"0\r\n\r\n"]])
    response = conn.request("GET", "/", reader=Recorder)
    reader = response.reader
    assert b"".join(reader.pieces) == b"data: a\n\n" and response.pieces == []
    assert time.time() - reader.fed_at[0] > 0.02  # fed long before the 0-chunk came


def test_a_collector_limit_keeps_the_first_bytes_and_the_connection(connect):
    ok = b"HTTP/1.1 500 Oops\r\nContent-Length: 10\r\n\r\n0123456789"
    conn = connect([[ok], [ok]])
    response = conn.request("GET", "/", reader=lambda r: Collector(r, limit=4))
    assert (response.status, response.body, response.complete) == (500, b"0123", True)
    assert conn.request("GET", "/").body == b"0123456789"


def test_a_reader_that_raises_closes_the_connection(connect):
    class Broken(Recorder):
        def feed(self, data, t):
            raise ValueError("reader bug")

    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    conn = connect([[ok], [ok]])
    with pytest.raises(ValueError):
        conn.request("GET", "/", reader=Broken)
    assert conn._stream is None


def test_a_negative_chunk_size_is_bad_framing(connect):
    conn = connect([[HEAD + b"-5\r\ndata: a\n\n\r\n0\r\n\r\n"]])
    response = conn.request("GET", "/")
    assert response.error == "bad chunked framing" and not response.complete


# A server in its own process (its sends must not wait for the client's event loop): it answers
# N connections at once with a first event, then, GAP_S later, a second event and the end, and
# prints the time of that second send.
_BURST_SERVER = r"""
import socket, sys, time
n, gap = int(sys.argv[1]), float(sys.argv[2])
head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
def chunk(p): return b"%x\r\n%s\r\n" % (len(p), p)
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
conns = []
for _ in range(n):
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    conns.append(conn)
for conn in conns:
    conn.sendall(head + chunk(b"data: first\n\n"))
time.sleep(gap)
second_at = time.time()
for conn in conns:
    conn.sendall(chunk(b"data: second\n\n") + b"0\r\n\r\n")
print(second_at, flush=True)
time.sleep(1)
"""


@pytest.mark.processes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernel receive timestamps")
def test_a_burst_of_first_tokens_is_read_before_slow_parsing_of_them_ends():
    """16 streams' first events land together; parsing each takes 3 ms (48 ms in all), and the
    second events come 20 ms after the first. Every first event must still be read, with its own
    arrival stamp, before the second one lands: reads are not held up by parsing."""
    streams, gap_s, parse_s = 16, 0.02, 0.003

    class SlowReader(Recorder):
        def __init__(self, response):
            super().__init__(response)
            self.stamps = []

        def feed(self, data, t):
            self.pieces.append(data)
            self.stamps.append(t)
            until = time.perf_counter() + parse_s
            while time.perf_counter() < until:  # parsing that holds the event loop
                pass

    server = subprocess.Popen([sys.executable, "-c", _BURST_SERVER, str(streams), str(gap_s)],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        conns = [Connection(Endpoint.parse(f"http://127.0.0.1:{port}"), timeout=10.0) for _ in range(streams)]
        jobs = [gevent.spawn(conn.request, "POST", "/", b"{}", reader=SlowReader) for conn in conns]
        gevent.joinall(jobs, timeout=10.0, raise_error=True)
        second_at = float(server.stdout.readline())
    finally:
        server.kill()
        server.wait()
    for conn in conns:
        conn.close()
    for job in jobs:
        reader = job.value.reader
        assert reader.pieces[0] == b"data: first\n\n", reader.pieces  # read alone, not with the second
        assert reader.stamps[0] < second_at
