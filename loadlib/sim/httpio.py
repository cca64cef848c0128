"""Just enough HTTP/1.1 for the simulator: read requests off a keep-alive socket, frame replies.

The simulator must out-run the client it measures, so this avoids a framework: a request is
read with a few `recvmsg` calls (which also bring the kernel's receive time) and split with bytes
methods, and replies are prebuilt byte strings
in the shape uvicorn sends (lower-case headers, `server: uvicorn`, chunked streaming bodies).
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from email.utils import formatdate
from typing import NamedTuple

import orjson

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
RECV_SIZE = 256 * 1024
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
KERNEL_TIMESTAMPS = sys.platform.startswith("linux")
_ANC_SIZE = socket.CMSG_SPACE(16) if KERNEL_TIMESTAMPS else 0
_TIMESPEC = struct.Struct("@qq")  # struct timespec: seconds, nanoseconds
# One read buffer for every connection (a fresh 256 KB bytes per read would cost an mmap): a
# greenlet copies what it read out of it before it can yield, so no other read can intervene.
_CHUNK = bytearray(RECV_SIZE)
_CHUNK_VIEW = memoryview(_CHUNK)

_REASONS = {200: "OK", 100: "Continue", 400: "Bad Request", 404: "Not Found",
            405: "Method Not Allowed", 413: "Payload Too Large", 429: "Too Many Requests",
            500: "Internal Server Error", 503: "Service Unavailable"}


class Request(NamedTuple):
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    keep_alive: bool
    received_at: float  # epoch s: kernel receive time of the request's first byte


class BadRequest(Exception):
    """The bytes on the socket are not a request we can serve; the connection is closed."""


_date_cache: list = [0, b""]


def http_date() -> bytes:
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[0] = now
        _date_cache[1] = formatdate(now, usegmt=True).encode()
    return _date_cache[1]


def enable_timestamps(sock) -> bool:
    """Asks the kernel to stamp what `sock` receives; False where it cannot.

    Set it on the listening socket at start too: Linux turns receive timestamps on for the
    whole stack lazily (deferred work after the first socket asks), so bytes that arrive in
    the first moments, or before `accept` returns, would otherwise carry no stamp; accepted
    sockets inherit the option.
    """
    if not KERNEL_TIMESTAMPS:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


class RequestReader:
    """Reads keep-alive requests off one connection, each stamped with the kernel's receive time.

    A request's `received_at` is the kernel timestamp (SO_TIMESTAMPNS) of the first read that
    carried any of its bytes, not the moment this greenlet got round to parsing it: when dozens
    of requests arrive at once, the later ones wait behind the earlier ones' parsing, and that
    wait is the server's, not the client's. The first read rather than the one that completed
    the head or body, because the client starts its TTFT clock just before its first byte
    leaves: a body that spans several reads (a long-context prompt of a megabyte) is inside
    the client's TTFT, so it must be inside the server's too, or a client benchmark would
    charge the transfer to the client.
    """

    def __init__(self, sock) -> None:
        self.sock = sock
        self.buf = bytearray()  # received, not yet consumed
        self._buf_at = 0.0  # receive time of the read that brought buf's first byte
        self._timestamps = enable_timestamps(sock)

    def _read(self) -> int:
        """One read appended to `buf`; returns its size (0 at EOF)."""
        if self._timestamps:
            size, anc, _flags, _addr = self.sock.recvmsg_into((_CHUNK,), _ANC_SIZE)
            at = time.time()
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = _TIMESPEC.unpack_from(data)
                    at = sec + nsec * 1e-9
        else:
            size = self.sock.recv_into(_CHUNK)
            at = time.time()
        if size and not self.buf:
            self._buf_at = at
        self.buf += _CHUNK_VIEW[:size]
        return size

    def _need(self, what: str) -> None:
        if not self._read():
            raise BadRequest(f"connection closed inside a {what}")

    def read_request(self) -> Request | None:
        """The next request on the connection; None at a clean EOF."""
        buf = self.buf
        if not buf and not self._read():
            return None
        received_at = self._buf_at
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(buf) > MAX_HEAD:
                raise BadRequest("request head too large")
            if not self._read():
                if buf.strip():
                    raise BadRequest("connection closed inside a request head")
                return None
        head = bytes(buf[:end]).decode("latin-1")
        del buf[:end + 4]
        lines = head.split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            raise BadRequest(f"bad request line {lines[0]!r}") from None
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        conn = headers.get("connection", "").lower()
        keep_alive = conn != "close" if version == "HTTP/1.1" else conn == "keep-alive"
        if headers.get("expect", "").lower() == "100-continue":
            self.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._read_chunked()
        else:
            length = int(headers.get("content-length") or 0)
            if length > MAX_BODY:
                raise BadRequest("request body too large")
            while len(buf) < length:
                self._need("request body")
            body = bytes(buf[:length])
            del buf[:length]
        path = target.split("?", 1)[0]
        return Request(method.upper(), path, headers, body, keep_alive, received_at)

    def _read_chunked(self) -> bytes:
        buf, body = self.buf, bytearray()
        while True:
            while b"\r\n" not in buf:
                self._need("chunked body")
            line = bytes(buf[:buf.find(b"\r\n")])
            size = int(line.split(b";")[0], 16)
            need = len(line) + 2 + size + 2
            while len(buf) < need:
                self._need("chunked body")
            body += buf[len(line) + 2:len(line) + 2 + size]
            del buf[:need]
            if size == 0:
                return bytes(body)


def response(status: int, body: bytes, content_type: bytes = b"application/json",
             extra: bytes = b"", keep_alive: bool = True, server: bytes = b"uvicorn") -> bytes:
    """A complete response with a Content-Length body (`extra`: raw header lines)."""
    return b"".join((
        b"HTTP/1.1 %d %s\r\ndate: %s\r\nserver: %s\r\ncontent-length: %d\r\n"
        b"content-type: %s\r\n" % (status, _REASONS.get(status, "Error").encode(), http_date(),
                                   server, len(body), content_type),
        extra, b"" if keep_alive else b"connection: close\r\n", b"\r\n", body))


def json_response(status: int, obj: object, extra: bytes = b"", keep_alive: bool = True,
                  server: bytes = b"uvicorn") -> bytes:
    return response(status, orjson.dumps(obj), b"application/json", extra, keep_alive, server)


def stream_head(extra: bytes = b"", server: bytes = b"uvicorn") -> bytes:
    """Status line and headers of a chunked event-stream response."""
    return (b"HTTP/1.1 200 OK\r\ndate: %s\r\nserver: %s\r\ncontent-type: text/event-stream; "
            b"charset=utf-8\r\n%stransfer-encoding: chunked\r\n\r\n" % (http_date(), server, extra))


def frame(payload: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)


END_CHUNKS = b"0\r\n\r\n"
