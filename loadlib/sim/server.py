"""The HTTP face of one simulated instance: routes, request parsing, chunk delivery.

Each connection is a greenlet reading keep-alive requests. A streaming chat request is handed
to the engine; the engine's step callback builds the step's chunk bytes and writes them straight
to the socket without blocking (the scheduler never waits on a slow client: whatever the kernel
does not take is queued and flushed by the connection's own greenlet).
"""

from __future__ import annotations

import socket as _socket
import time
import uuid
from typing import Any

import orjson
from gevent.event import Event
from gevent.server import StreamServer

from loadlib.sim import httpio, tokenizer
from loadlib.sim.engine import Engine, SimRequest
from loadlib.sim.presets import SimConfig
from loadlib.sim.trace import TraceWriter
from loadlib.sim.wire import SHAPES, sglang_error

_PEEK = _socket.MSG_PEEK | _socket.MSG_DONTWAIT


class _Delivery:
    """Turns one request's engine steps into bytes on its socket, and records its trace."""

    __slots__ = ("sock", "raw", "req", "shape", "stream", "include_usage", "cache_report",
                 "trace", "received_at", "first_token_at", "last_token_at", "done_at", "chunks",
                 "pending", "flushing", "broken", "finished", "wake", "head")

    def __init__(self, sock, req: SimRequest, shape, stream: bool, include_usage: bool,
                 cache_report: bool, trace: TraceWriter | None, received_at: float,
                 head: bytes) -> None:
        self.sock, self.raw = sock, sock._sock
        self.req, self.shape, self.stream = req, shape, stream
        self.include_usage, self.cache_report = include_usage, cache_report
        self.trace, self.received_at, self.head = trace, received_at, head
        self.first_token_at = self.last_token_at = self.done_at = None
        self.chunks = 0
        self.pending: list[bytes] = []
        self.flushing = self.broken = self.finished = False
        self.wake = Event()
        req.on_step = self.on_step if stream else self.on_step_collect

    # --- called by the engine's loop: never block, never raise ----------------------------------

    def on_step(self, start: int, end: int, done: bool) -> None:
        req, shape = self.req, self.shape
        out = req.output
        rl = out.reasoning_len
        parts = [self.head, shape.role()] if start == 0 else []
        if start < rl:
            parts.append(shape.reasoning(b"".join(out.escaped[start:min(end, rl)])))
            self.chunks += 1
        if end > rl:
            parts.append(shape.content(b"".join(out.escaped[max(start, rl):end])))
            self.chunks += 1
        if done:
            parts.append(shape.finish(req.finish_reason, self._matched_stop()))
            if self.include_usage:
                parts.append(shape.usage(req.prompt_tokens, req.limit, self._cached(),
                                         min(req.limit, rl)))
            parts.append(shape.done())
        self._write(parts[0] if len(parts) == 1 else b"".join(parts))
        now = time.time()
        if start == 0:
            self.first_token_at = now
        self.last_token_at = now
        if done:
            self.done_at = now
            self._done()

    def on_step_collect(self, start: int, end: int, done: bool) -> None:
        if done:
            self._done()

    def _done(self) -> None:
        self.finished = True
        self.wake.set()

    def _matched_stop(self) -> int | None:
        return tokenizer.EOS_TOKEN_ID if self.req.finish_reason == "stop" else None

    def _cached(self) -> int | None:
        return self.req.cached_tokens if self.cache_report else None

    def _write(self, data: bytes) -> None:
        if self.broken:
            return
        if self.pending or self.flushing:
            self.pending.append(data)
            self.wake.set()
            return
        try:
            sent = self.raw.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._break()
            return
        if sent < len(data):
            self.pending.append(data[sent:])
            self.wake.set()

    def _break(self) -> None:
        self.broken = True
        self.req.aborted = True
        self.wake.set()

    # --- the connection's greenlet ----------------------------------------------------------

    def wait(self) -> None:
        """Flushes queued bytes until the request is done or the client has gone."""
        while True:
            if not self.wake.wait(timeout=0.5):
                if self._peer_closed():
                    self._break()
                    return
                continue
            self.wake.clear()
            while self.pending and not self.broken:
                data = b"".join(self.pending)
                self.pending.clear()
                self.flushing = True
                try:
                    self.sock.sendall(data)
                except OSError:
                    self._break()
                finally:
                    self.flushing = False
            if self.broken or (self.finished and not self.pending):
                return

    def _peer_closed(self) -> bool:
        try:
            return self.raw.recv(1, _PEEK) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def trace_record(self) -> dict[str, Any]:
        req = self.req
        return {"request_id": req.rid, "received_at": self.received_at,
                "first_token_at": self.first_token_at, "last_token_at": self.last_token_at,
                "done_at": self.done_at, "completion_tokens": req.limit,
                "prompt_tokens": req.prompt_tokens, "cached_tokens": req.cached_tokens,
                "chunks": self.chunks}


class SimServer:
    """One simulated instance: an engine behind an HTTP listener."""

    def __init__(self, cfg: SimConfig, host: str = "127.0.0.1", port: int = 0,
                 trace: TraceWriter | None = None) -> None:
        self.cfg = cfg
        self.engine = Engine(cfg)
        self.trace = trace
        self._shape = SHAPES[cfg.flavor]
        self._server = StreamServer((host, port), self._handle)

    @property
    def port(self) -> int:
        return self._server.server_port

    def start(self) -> None:
        self._server.start()
        self.engine.start()

    def stop(self) -> None:
        self._server.stop(timeout=1)
        self.engine.stop()

    # --- connections ----------------------------------------------------------------------------

    def _handle(self, sock, addr) -> None:
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        buf = bytearray()
        try:
            while True:
                request = httpio.read_request(sock, buf)
                if request is None or not self._route(sock, request) or not request.keep_alive:
                    return
        except httpio.BadRequest as exc:
            self._send(sock, httpio.json_response(400, sglang_error(str(exc)), keep_alive=False))
        except (OSError, ValueError):
            return
        finally:
            sock.close()

    @staticmethod
    def _send(sock, data: bytes) -> bool:
        try:
            sock.sendall(data)
            return True
        except OSError:
            return False

    def _route(self, sock, request: httpio.Request) -> bool:
        """Answers one request; False when the connection must close."""
        method, path = request.method, request.path
        if path == "/v1/chat/completions":
            if method != "POST":
                return self._send(sock, httpio.json_response(405, {"detail": "Method Not Allowed"}))
            return self._chat(sock, request)
        if path == "/health" and method == "GET":
            return self._send(sock, httpio.response(200, b"", b"text/plain; charset=utf-8"))
        if path == "/v1/models" and method == "GET":
            return self._send(sock, httpio.json_response(200, self._models()))
        return self._send(sock, httpio.json_response(404, {"detail": "Not Found"}))

    def _models(self) -> dict[str, Any]:
        name = self.cfg.served_model_name
        return {"object": "list", "data": [{
            "id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang",
            "root": name, "parent": None, "max_model_len": self.cfg.context_length}]}

    # --- chat -------------------------------------------------------------------------------------

    def _chat(self, sock, request: httpio.Request) -> bool:
        received_at = time.time()
        try:
            body = orjson.loads(request.body)
            if not isinstance(body, dict):
                raise ValueError("the request body must be a JSON object")
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
                raise ValueError("messages must be a non-empty list of objects")
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
            if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens <= 0):
                raise ValueError("max_tokens must be positive")
            temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
            kwargs = body.get("chat_template_kwargs") or {}
            thinking = isinstance(kwargs, dict) and kwargs.get("enable_thinking") is True
        except (ValueError, TypeError) as exc:
            return self._send(sock, httpio.json_response(400, sglang_error(str(exc))))
        rid = request.headers.get("x-request-id") or body.get("rid") or uuid.uuid4().hex
        natural = request.headers.get("x-sim-natural-tokens")
        req = self.engine.make_request(str(rid), messages, max_tokens, temperature, thinking,
                                       int(natural) if natural and natural.isdigit() else None)
        error = self._check_length(req, max_tokens)
        if error:
            return self._send(sock, httpio.json_response(400, sglang_error(error)))
        stream = bool(body.get("stream"))
        options = body.get("stream_options") or {}
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        model = body.get("model") or self.cfg.served_model_name
        shape = self._shape(str(rid), str(model), int(received_at))
        rid_header = b"x-request-id: %b\r\n" % str(rid).encode("latin-1", "replace")
        delivery = _Delivery(sock, req, shape, stream, include_usage, self.cfg.enable_cache_report,
                             self.trace, received_at, httpio.stream_head(rid_header))
        self.engine.submit(req)
        delivery.wait()
        if delivery.broken:
            self.engine.abort(req)
            return False
        if not stream:
            ok = self._send(sock, httpio.json_response(200, self._full_response(req, shape), rid_header))
            delivery.first_token_at = delivery.last_token_at = delivery.done_at = time.time()
        else:
            ok = True
        if self.trace is not None:
            self.trace.write(delivery.trace_record())
        return ok

    def _check_length(self, req: SimRequest, max_tokens: int | None) -> str | None:
        ctx = self.cfg.context_length
        if req.prompt_tokens >= ctx:
            return (f"The input ({req.prompt_tokens} tokens) is longer than the model's context "
                    f"length ({ctx} tokens).")
        if max_tokens is not None and req.prompt_tokens + max_tokens > ctx:
            return (f"Requested token count exceeds the model's maximum context length of {ctx} "
                    f"tokens. You requested a total of {req.prompt_tokens + max_tokens} tokens: "
                    f"{req.prompt_tokens} tokens from the input messages and {max_tokens} tokens "
                    f"for the completion. Please reduce the number of tokens in the input "
                    f"messages or the completion to fit within the limit.")
        return None

    def _full_response(self, req: SimRequest, shape) -> dict[str, Any]:
        texts, rl = req.output.texts, req.output.reasoning_len
        answer = "".join(texts[rl:req.limit]) if req.limit > rl else ""
        reasoning = "".join(texts[:min(rl, req.limit)]) or None
        usage = {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + req.limit,
                 "completion_tokens": req.limit,
                 "prompt_tokens_details": ({"cached_tokens": req.cached_tokens}
                                           if self.cfg.enable_cache_report else None),
                 "reasoning_tokens": min(req.limit, rl)}
        matched = tokenizer.EOS_TOKEN_ID if req.finish_reason == "stop" else None
        return shape.response(answer, reasoning, req.finish_reason, matched, usage)
