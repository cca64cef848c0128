"""Just enough HTTP/1.1 for the simulator: read requests off a keep-alive socket, frame replies.

The simulator must out-run the client it measures, so this avoids a framework: a request is
read with a few recv calls and split with bytes methods, and replies are prebuilt byte strings
in the shape uvicorn sends (lower-case headers, `server: uvicorn`, chunked streaming bodies).
"""

from __future__ import annotations

import time
from email.utils import formatdate
from typing import NamedTuple

import orjson

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024

_REASONS = {200: "OK", 100: "Continue", 400: "Bad Request", 404: "Not Found",
            405: "Method Not Allowed", 413: "Payload Too Large", 429: "Too Many Requests",
            500: "Internal Server Error", 503: "Service Unavailable"}


class Request(NamedTuple):
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    keep_alive: bool


class BadRequest(Exception):
    """The bytes on the socket are not a request we can serve; the connection is closed."""


_date_cache: list = [0, b""]


def http_date() -> bytes:
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[0] = now
        _date_cache[1] = formatdate(now, usegmt=True).encode()
    return _date_cache[1]


def read_request(sock, buf: bytearray) -> Request | None:
    """Reads one request from `sock` (leftover bytes live in `buf`); None at a clean EOF."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(buf) > MAX_HEAD:
            raise BadRequest("request head too large")
        data = sock.recv(65536)
        if not data:
            if buf.strip():
                raise BadRequest("connection closed inside a request head")
            return None
        buf += data
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
        sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _read_chunked(sock, buf)
    else:
        length = int(headers.get("content-length") or 0)
        if length > MAX_BODY:
            raise BadRequest("request body too large")
        while len(buf) < length:
            data = sock.recv(max(65536, length - len(buf)))
            if not data:
                raise BadRequest("connection closed inside a request body")
            buf += data
        body = bytes(buf[:length])
        del buf[:length]
    path = target.split("?", 1)[0]
    return Request(method.upper(), path, headers, body, keep_alive)


def _read_chunked(sock, buf: bytearray) -> bytes:
    body = bytearray()
    while True:
        while b"\r\n" not in buf:
            data = sock.recv(65536)
            if not data:
                raise BadRequest("connection closed inside a chunked body")
            buf += data
        line, _, _ = bytes(buf).partition(b"\r\n")
        size = int(line.split(b";")[0], 16)
        need = len(line) + 2 + size + 2
        while len(buf) < need:
            data = sock.recv(65536)
            if not data:
                raise BadRequest("connection closed inside a chunked body")
            buf += data
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
