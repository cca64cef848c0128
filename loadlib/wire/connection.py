"""A lean HTTP/1.1 client connection for streamed responses, on gevent sockets.

Why not `FastHttpUser`'s client: at tens of thousands of SSE chunks per second, the cost per
received buffer decides both throughput and timing accuracy. Here every ready socket is read in
the event loop's own io callback (one `recvmsg` with the kernel's arrival timestamp,
SO_TIMESTAMPNS, so a busy loop does not inflate TTFT), before any parsing; the reads are then
de-chunked by offsets and handed to a reader the caller chooses (the SSE parser for a stream, so
that nothing of an answer is kept and no work waits for its end; a `Collector` for small
bodies), in short slices between polls and without a greenlet switch per read.

The response is always read to its end, so the connection is reused (keep-alive).
"""

from __future__ import annotations

import _socket
import errno
import logging
import socket
import ssl
import struct
import sys
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Protocol
from urllib.parse import urlsplit

import gevent
from gevent import socket as gsocket
from gevent.hub import Waiter
from greenlet import getcurrent, greenlet

_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_KERNEL_TIMESTAMPS = sys.platform.startswith("linux")
_ANC_SIZE = socket.CMSG_SPACE(16) if _KERNEL_TIMESTAMPS else 0
_TIMESPEC = struct.Struct("@qq")
_RECV_SIZE = 65536  # per read; recvmsg allocates this much and shrinks it to what came
_MAX_HEADER_BYTES = 65536
_READ_AHEAD = 64  # reads queued for a stream's parser before reading it pauses
_READ_PRIORITY = 1  # libev priority of the reads: above the dispatcher's parsing (0)
_SLICE_S = 0.0001  # parsing between two polls of the sockets
_log = logging.getLogger("uni-bench")
_unverified: set[str] = set()  # endpoints already warned about (once per process)
MAX_BODY_BYTES = 64 << 20  # far above any chat stream; bounds memory when --host is not an LLM server


def _switch_kernel_timestamps_on() -> socket.socket | None:
    """Linux turns receive timestamping on for the whole stack lazily, some time after the first
    socket asks for it; segments that arrive before are not stamped. One socket that asks at
    import, and stays open, keeps it on before the first request is sent."""
    if not _KERNEL_TIMESTAMPS:
        return None
    try:
        keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        keeper.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        return keeper
    except OSError:
        return None


_TIMESTAMP_KEEPER = _switch_kernel_timestamps_on()


Consumer = Callable[[bytes, float], bool]  # takes one read; True: stop and hand back to the greenlet


class TransportError(Exception):
    """The exchange failed below HTTP (connect, reset, timeout, bad framing); str is the reason."""


class BodyReader(Protocol):
    """Takes a response body piece by piece, as each arrives (de-chunked, any split)."""

    ended: bool  # the content said it is over (an SSE `[DONE]`): the framing gets a short grace

    def feed(self, data: bytes, t: float) -> None:
        """One piece of the body and its arrival time (kernel receive stamp where available)."""


@dataclass(slots=True)
class Response:
    """A response as received: status, headers and, when the body went to a `Collector`,
    its pieces with the wall-clock time each one arrived."""

    status: int
    headers: dict[str, str]
    sent_at: float
    pieces: list[bytes] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    complete: bool = False  # the body ended as its framing says (not cut off)
    error: str | None = None  # transport failure after the headers, if any
    reader: BodyReader | None = None  # what the body was fed to

    @property
    def body(self) -> bytes:
        return b"".join(self.pieces)


class Collector:
    """Keeps a body's pieces in `Response.pieces` (the first `limit` bytes, when given); the
    rest is read and dropped so the connection stays usable."""

    ended = False

    def __init__(self, response: Response, limit: int | None = None) -> None:
        self.pieces = response.pieces
        self.arrivals = response.arrivals
        self.room = limit if limit is not None else MAX_BODY_BYTES

    def feed(self, data: bytes, t: float) -> None:
        if self.room > 0:
            data = data[:self.room]
            self.room -= len(data)
            self.pieces.append(data)
        elif self.arrivals:  # past the limit only the time of the last byte is still of use
            self.arrivals.pop()
        self.arrivals.append(t)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a base URL points: scheme, host, port and path prefix (without a trailing /v1)."""

    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, url: str) -> "Endpoint":
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected http://HOST[:PORT] or https://HOST[:PORT], got {url!r}")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise ValueError(f"bad port in {url!r}") from None
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):
            prefix = prefix[:-3]
        return cls(parts.scheme, parts.hostname, port, prefix)

    @property
    def authority(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


class Connection:
    """One keep-alive connection to an endpoint; reconnects after a failure or a close."""

    def __init__(self, endpoint: Endpoint, timeout: float = 900.0, verify_tls: bool = True,
                 connect_timeout: float = 10.0) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.connect_timeout = min(connect_timeout, timeout)  # connect and TLS handshake: never past the request's
        self._tls: ssl.SSLContext | None = None
        if endpoint.scheme == "https":
            self._tls = ssl.create_default_context()
            if not verify_tls:
                self._tls.check_hostname = False
                self._tls.verify_mode = ssl.CERT_NONE
                if endpoint.authority not in _unverified:
                    _unverified.add(endpoint.authority)
                    _log.warning("--insecure: the TLS certificate of https://%s is not verified",
                                 endpoint.authority)
        self._stream: _RawStream | _TlsStream | None = None
        self._host_header = f"Host: {endpoint.authority}\r\n".encode()

    # --- public -------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None, timeout: float | None = None,
                reader: Callable[[Response], BodyReader] | None = None) -> Response:
        """Sends one request and reads the whole response; raises TransportError before headers.

        `reader` is called once the headers are in and returns what each body piece is fed to
        as it arrives (default: a `Collector` into `Response.pieces`). A failure after the
        headers (reset, timeout, cut-off body) is returned in `Response.error` with what had
        arrived, so the caller can still record partial data.
        """
        head = [f"{method} {self.endpoint.prefix}{path} HTTP/1.1\r\n".encode(), self._host_header]
        for name, value in (headers or {}).items():
            head.append(f"{name}: {value}\r\n".encode())
        if body is not None:
            head.append(b"Content-Length: %d\r\n" % len(body))
        head.append(b"\r\n")
        payload = b"".join(head) + (body or b"")
        deadline = time.time() + (timeout if timeout is not None else self.timeout)
        open_reader = reader or Collector
        try:
            return self._exchange(payload, deadline, open_reader)
        except _StaleConnection:  # the server had closed the idle connection: one fresh try
            return self._exchange(payload, deadline, open_reader)

    def connect(self) -> None:
        """Opens the connection ahead of the first request (a failure is left for that request
        to report), so that connection set-up never delays a round's synchronised start."""
        if self._stream is None:
            try:
                self._stream = self._connect()
            except TransportError:
                pass

    def close(self) -> None:
        if self._stream is not None:
            try:
                self._stream.close()
            finally:
                self._stream = None

    # --- internals ----------------------------------------------------------------------------

    def _connect(self) -> "_RawStream | _TlsStream":
        ep = self.endpoint
        try:
            sock = gsocket.create_connection((ep.host, ep.port), timeout=self.connect_timeout)
        except socket.timeout:
            raise TransportError(f"connect timeout to {ep.authority}") from None
        except OSError as exc:
            raise TransportError(f"connect to {ep.authority}: {_os_reason(exc)}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is None:
            return _RawStream(sock)
        try:
            return _TlsStream(self._tls.wrap_socket(sock, server_hostname=ep.host))
        except (ssl.SSLError, OSError) as exc:
            sock.close()
            raise TransportError(f"TLS to {ep.authority}: {exc}") from None

    def _exchange(self, payload: bytes, deadline: float,
                  open_reader: Callable[[Response], BodyReader]) -> Response:
        reused = self._stream is not None
        if self._stream is None:
            self._stream = self._connect()
        stream = self._stream
        timer = gevent.Timeout(max(deadline - time.time(), 0.001), _Expired)
        timer.start()
        try:
            try:
                _dispatcher_of(gevent.get_hub()).take_turn()
                sent_at = time.time()
                stream.sendall(payload)
                head, rest, t_first = _read_head(stream, reused)
            except _StaleConnection:
                self.close()
                raise
            except _Expired:
                self.close()
                raise TransportError("timeout before headers") from None
            except OSError as exc:
                self.close()
                if reused and exc.errno in (errno.ECONNRESET, errno.EPIPE):
                    raise _StaleConnection() from None
                raise TransportError(f"{_os_reason(exc)} before headers") from None
            except TransportError:
                self.close()
                raise
            try:
                status, headers = _parse_head(head)
            except TransportError:
                self.close()  # whatever follows on this connection cannot be trusted
                raise
            response = Response(status, headers, sent_at)
            response.reader = open_reader(response)
            _read_body(stream, response, response.reader, rest, t_first, timer, deadline)
        except BaseException:  # a reader's bug or the greenlet killed: the stream is mid-response
            self.close()
            raise
        finally:
            timer.close()
        if not response.complete or response.error or headers.get("connection", "").lower() == "close":
            self.close()
        else:
            stream.idle()
        return response


class _Expired(Exception):
    """The request's deadline passed (raised into the greenlet by its gevent.Timeout)."""


class _RawStream:
    """A plain TCP connection, read the moment the kernel has data.

    The read itself runs in the event loop's io callback, ahead of any parsing: when many
    streams are ready at once (a round's first tokens land together), every socket is read,
    with its kernel arrival stamp, before any greenlet parses what it got. A first token is so
    read before the stream's next chunk arrives, which Linux would merge into the unread segment
    under the later stamp. What is read waits in a short queue (reading pauses when it is full)
    for the `_Dispatcher`, which feeds it to the consumer given to `pump` (the body's decoder;
    `recv` takes one read the same way).
    """

    def __init__(self, sock: gsocket.socket) -> None:
        family, type_, proto = sock.family, sock.type, sock.proto
        self._sock = _socket.socket(family, type_, proto, sock.detach())
        self._sock.setblocking(False)
        fd = self._sock.fileno()
        hub = gevent.get_hub()
        self._hub = hub
        self._wait = hub.wait
        self._dispatcher = _dispatcher_of(hub)
        self._woken = self.woken  # the dispatcher's turn for this stream (bound once)
        self._readable = hub.loop.io(fd, 1)
        self._readable.priority = _READ_PRIORITY
        self._writable = hub.loop.io(fd, 2)
        self._received: deque[tuple[bytes, float] | OSError] = deque()  # read, not yet taken
        self._reader: greenlet | None = None  # the greenlet waiting in pump(), if any
        self._consume: Consumer | None = None  # its consumer, called by the dispatcher
        self._failure: Exception | None = None  # what the consumer raised, for pump() to raise
        self._wake_due = False
        self._timestamps = False
        if _KERNEL_TIMESTAMPS:
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self._timestamps = True
            except OSError:
                pass

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                sent = self._sock.send(view)
            except BlockingIOError:
                self._wait(self._writable)
                continue
            view = view[sent:]

    def recv(self) -> tuple[bytes, float]:
        """The next read: (bytes, arrival time); b"" at the peer's close."""
        got: list[tuple[bytes, float]] = []

        def take(data: bytes, t: float) -> bool:
            got.append((data, t))
            return True

        self.pump(take)
        return got[0]

    def _on_readable(self) -> None:
        """In the loop, as soon as the socket is readable: one read, queued with its stamp."""
        try:
            if self._timestamps:
                data, anc, _flags, _addr = self._sock.recvmsg(_RECV_SIZE, _ANC_SIZE)
                if anc:
                    sec, nsec = _TIMESPEC.unpack_from(anc[0][2])
                    item: tuple[bytes, float] | OSError = (data, sec + nsec * 1e-9)
                else:
                    item = (data, time.time())
            else:
                data = self._sock.recv(_RECV_SIZE)
                item = (data, time.time())
        except BlockingIOError:  # a spurious wake-up
            return
        except OSError as exc:
            item, data = exc, b""
        received = self._received
        received.append(item)
        if not data or len(received) >= _READ_AHEAD:  # the end, or the parser is behind
            self._readable.stop()
        if self._reader is not None and not self._wake_due:
            self._wake_due = True
            self._dispatcher.wake(self._woken)

    def idle(self) -> None:
        """Between requests nothing is read (a server's close is found by the next request), and
        an idle connection does not keep the event loop running."""
        self._readable.stop()

    def pump(self, consume: Consumer) -> None:
        """Feeds each read to `consume` until it returns True; raises what it raised.

        What was read already is consumed here; later reads are consumed by the dispatcher in
        the loop, so a streaming body costs no greenlet switch per read: the greenlet is woken
        once, when `consume` says stop (the body's end, or a change its caller must act on)."""
        if self._drain(consume):
            return
        if not self._readable.active:
            self._readable.start(self._on_readable)
        self._consume = consume
        self._reader = getcurrent()
        try:
            self._hub.switch()
        finally:
            self._reader = self._consume = None
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def woken(self) -> None:
        """The dispatcher's turn for this stream: what was read goes to the consumer of pump(),
        and its greenlet is switched to once the consumer says stop (or raised)."""
        self._wake_due = False
        reader, consume = self._reader, self._consume
        if reader is None or consume is None:  # the greenlet left pump() (a timeout)
            return
        try:
            if not self._drain(consume):
                if not self._readable.active:  # reading paused while the queue was full
                    self._readable.start(self._on_readable)
                return
        except Exception as exc:  # noqa: BLE001 - raised in the greenlet, by pump()
            self._failure = exc
        reader.switch()

    def _drain(self, consume: Consumer) -> bool:
        """Feeds the queued reads to `consume`; True once it says stop (a queued failure raises)."""
        received = self._received
        while received:
            item = received.popleft()
            if type(item) is not tuple:
                raise item
            if consume(*item):
                return True
        return False

    def close(self) -> None:
        self._readable.close()
        self._writable.close()
        self._received.clear()
        self._sock.close()


class _Dispatcher:
    """Gives the streams that were read their turn to parse (`_RawStream.woken`), and the
    requests about to be sent their turn to send (`take_turn`), a slice of time at a time.

    Reads run in io callbacks at a higher libev priority than this dispatcher's zero timer, so
    each loop iteration reads every ready socket before any parsing, and parses for at most
    `_SLICE_S` before the next poll: a burst of hundreds of first tokens (a round's start) is
    read within a slice of its arrival, whatever the parsing costs. Woken through gevent's own
    callbacks, the greenlets would parse the whole burst between two polls.
    """

    def __init__(self, hub: gevent.hub.Hub) -> None:
        self._hub = hub
        self._due: deque[Callable[[], None]] = deque()
        self._timer = hub.loop.timer(0.0)  # priority 0, below the reads

    def wake(self, turn: Callable[[], None]) -> None:
        """Runs `turn` in a coming slice."""
        self._due.append(turn)
        if not self._timer.active:
            self._timer.start(self._run)

    def take_turn(self) -> None:
        """Waits for the calling greenlet's turn in a slice: a burst of requests sent at once (a
        round's start) is sliced between polls like the parsing, so the streams already
        answering are read on time."""
        waiter = Waiter(self._hub)
        self.wake(partial(waiter.switch, None))
        waiter.get()

    def _run(self) -> None:
        due = self._due
        until = time.perf_counter() + _SLICE_S
        while due:
            due.popleft()()
            if time.perf_counter() >= until:
                break
        if due:  # after the next poll
            self._timer.start(self._run)


def _dispatcher_of(hub: gevent.hub.Hub) -> _Dispatcher:
    dispatcher = _DISPATCHERS.get(hub)
    if dispatcher is None:
        dispatcher = _DISPATCHERS[hub] = _Dispatcher(hub)
    return dispatcher


_DISPATCHERS: "weakref.WeakKeyDictionary[gevent.hub.Hub, _Dispatcher]" = weakref.WeakKeyDictionary()


class _TlsStream:
    """A TLS connection through gevent's SSL socket (arrival time taken on wake-up)."""

    def __init__(self, sock: gsocket.socket) -> None:
        sock.settimeout(None)  # the exchange's gevent.Timeout bounds every wait
        self._sock = sock

    def sendall(self, data: bytes) -> None:
        self._sock.sendall(data)

    def recv(self) -> tuple[bytes, float]:
        return self._sock.recv(_RECV_SIZE), time.time()

    def pump(self, consume: Consumer) -> None:
        while not consume(*self.recv()):
            pass

    def idle(self) -> None:
        pass

    def close(self) -> None:
        self._sock.close()


def _read_head(stream: "_RawStream | _TlsStream", reused: bool) -> tuple[bytes, bytes, float]:
    """The head, the body bytes read with it and their arrival (a server may send its headers
    only with the first token, as the simulator does)."""
    buf = b""
    while True:
        data, t = stream.recv()
        if not data:
            if not buf and reused:
                raise _StaleConnection()
            raise TransportError("connection closed before headers")
        buf += data
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            return buf[:end], buf[end + 4:], t
        if len(buf) > _MAX_HEADER_BYTES:
            raise TransportError("response headers over 64 KiB")


_DONE_GRACE_S = 5.0  # after [DONE], how long the rest of the framing may take


def _read_body(stream: "_RawStream | _TlsStream", response: Response, reader: BodyReader,
               rest: bytes, t: float, timer: gevent.Timeout, deadline: float) -> None:
    headers = response.headers
    if response.status in (204, 304) or 100 <= response.status < 200:
        response.complete = True
        return
    decoder: _Body
    if "chunked" in headers.get("transfer-encoding", "").lower():
        decoder = _ChunkedBody(reader)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
            if length < 0:
                raise ValueError(length)
            decoder = _LengthBody(reader, length)
        except ValueError:
            response.error = "bad Content-Length"
            return
    else:
        decoder = _CloseBody(reader)
    grace: gevent.Timeout | None = None
    received = len(rest)

    def consume(data: bytes, t: float) -> bool:
        """One read into the decoder; True when the greenlet must act (the end, or [DONE])."""
        nonlocal received
        if not data:
            decoder.eof()
            return True
        received += len(data)
        if received > MAX_BODY_BYTES:
            raise TransportError("response body over 64 MiB")
        decoder.feed(data, t)
        return decoder.finished or (reader.ended and grace is None)

    try:
        if rest:
            decoder.feed(rest, t)
        while not decoder.finished:
            if reader.ended and grace is None:
                timer.close()
                grace = gevent.Timeout(min(_DONE_GRACE_S, max(deadline - time.time(), 0.001)), _Expired)
                grace.start()
            stream.pump(consume)
    except _Expired:
        if not reader.ended:  # after [DONE] the stream is over; only the framing lingered
            response.error = "timeout mid-stream"
    except TransportError as exc:
        response.error = str(exc)
    except OSError as exc:
        response.error = f"{_os_reason(exc)} mid-stream"
    finally:
        if grace is not None:
            grace.close()
    response.complete = decoder.finished


class _StaleConnection(Exception):
    """A reused keep-alive connection was closed by the server before answering."""


class _Body:
    """Undoes the body's framing; each decoded piece goes to the reader as it comes."""

    finished = False

    def __init__(self, reader: BodyReader) -> None:
        self.reader = reader

    def feed(self, data: bytes, t: float) -> None:
        raise NotImplementedError

    def eof(self) -> None:
        raise TransportError("connection closed mid-stream")


class _CloseBody(_Body):
    """Body delimited by the connection's close (HTTP/1.0 style)."""

    def feed(self, data: bytes, t: float) -> None:
        self.reader.feed(data, t)

    def eof(self) -> None:
        self.finished = True


class _LengthBody(_Body):
    def __init__(self, reader: BodyReader, length: int) -> None:
        super().__init__(reader)
        self.left = length
        self.finished = length == 0

    def feed(self, data: bytes, t: float) -> None:
        if len(data) > self.left:
            data = data[: self.left]
        self.reader.feed(data, t)
        self.left -= len(data)
        self.finished = self.left == 0


class _ChunkedBody(_Body):
    """Transfer-Encoding: chunked, decoded incrementally by offsets. The payload of one read
    goes to the reader in one piece (no copy when it is one chunk), so a read that carries
    several events costs one reader call, not one per chunk."""

    def __init__(self, reader: BodyReader) -> None:
        super().__init__(reader)
        self.left = 0  # payload bytes still due in the current chunk
        self.skip = 0  # CRLF bytes still due after the current chunk
        self.carry = b""  # an incomplete size line
        self.trailer = False  # the zero chunk came; waiting for the final CRLF

    def feed(self, data: bytes, t: float) -> None:
        if self.carry:
            data = self.carry + data
            self.carry = b""
        elif not self.left and not self.skip and not self.trailer:  # fast path: a read of one whole chunk
            eol = data.find(b"\r\n")
            if 0 < eol < 17:  # at most 16 hex digits, no extension
                try:
                    stop = eol + 2 + int(data[:eol], 16)
                except ValueError:
                    stop = 0
                if stop > eol + 2 and stop + 2 == len(data) and data.endswith(b"\r\n"):
                    self.reader.feed(data[eol + 2:stop], t)
                    return
        parts: list[bytes] = []
        try:
            self._decode(data, parts)
        finally:  # what came before bad framing is still the response's
            if parts:
                self.reader.feed(parts[0] if len(parts) == 1 else b"".join(parts), t)

    def _decode(self, data: bytes, parts: list[bytes]) -> None:
        pos, end = 0, len(data)
        while pos < end:
            if self.left:
                take = min(self.left, end - pos)
                parts.append(data if take == end else data[pos:pos + take])
                self.left -= take
                pos += take
                if not self.left:
                    self.skip = 2
                continue
            if self.skip:
                take = min(self.skip, end - pos)
                self.skip -= take
                pos += take
                continue
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                self.carry = data[pos:]
                if len(self.carry) > 1024:
                    raise TransportError("bad chunked framing")
                return
            line = data[pos:eol]
            pos = eol + 2
            if self.trailer:
                if not line:
                    self.finished = True
                    return
                continue
            size = _chunk_size(line)
            stop = pos + size
            if size == 0:
                self.trailer = True
            elif stop + 2 <= end:  # the whole chunk and its CRLF are here (the usual case)
                parts.append(data[pos:stop])
                pos = stop + 2
            else:
                self.left = size


def _chunk_size(line: bytes) -> int:
    """A chunk's size from its size line (hex, optionally `;extensions`)."""
    try:
        size = int(line, 16)
    except ValueError:
        try:
            size = int(line.split(b";", 1)[0], 16)
        except ValueError:
            raise TransportError("bad chunked framing") from None
    if size < 0:
        raise TransportError("bad chunked framing")
    return size


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise TransportError(f"not an HTTP response: {lines[0][:60]!r}")
    try:
        status = int(parts[1])
    except ValueError:
        raise TransportError(f"bad status line: {lines[0][:60]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return status, headers


def _os_reason(exc: OSError) -> str:
    if exc.errno in (errno.ECONNRESET, errno.EPIPE):
        return "connection reset"
    if exc.errno == errno.ECONNREFUSED:
        return "connection refused"
    return exc.strerror or type(exc).__name__

