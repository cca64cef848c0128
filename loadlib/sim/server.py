"""The HTTP face of one simulated instance: routes, request parsing, chunk delivery, faults.

Each connection is a greenlet reading keep-alive requests. A chat request is handed to the
engine; the engine's step callback builds the step's chunk bytes and writes them straight to
the socket without blocking (the scheduler never waits on a slow client: whatever the kernel
does not take, or what a stall fault holds back, is queued and flushed by the connection's own
greenlet, and its trace timestamps are taken when that flush returns).
"""

from __future__ import annotations

import dataclasses
import socket as _socket
import time
import uuid
from typing import Any

import gevent
import orjson
from gevent.event import Event
from gevent.lock import BoundedSemaphore
from gevent.server import StreamServer

from loadlib.sim import httpio, metrics, server_args, tokenizer
from loadlib.sim.engine import Engine, SimRequest
from loadlib.sim.faults import HEADER as FAULT_HEADER
from loadlib.sim.faults import FaultPicker, Faults
from loadlib.sim.presets import SimConfig
from loadlib.sim.trace import TraceWriter
from loadlib.sim.wire import SHAPES, SpecCounts, llamacpp_timings
from loadlib.wire.flavours import FLAVOURS

_PEEK = _socket.MSG_PEEK | _socket.MSG_DONTWAIT
_FIRST, _LAST, _DONE = 1, 2, 4  # which trace timestamps a queued write still owes
_FLUSH_MESSAGE = (b"Cache flushed.\nPlease check backend logs for more details. (When there are "
                  b"running or waiting requests, the operation will not be performed.)\n")


def _spec_counts(req: SimRequest, draft_tokens: int) -> SpecCounts:
    return SpecCounts(req.verify_steps, draft_tokens - 1, req.accepted, tuple(req.accept_histogram), req.limit)


class _Delivery:
    """Turns one request's engine steps into bytes on its socket, and records its trace."""

    __slots__ = ("sock", "raw", "engine", "req", "shape", "include_usage", "cache_report",
                 "received_at", "first_token_at", "last_token_at", "done_at", "chunks",
                 "pending", "owed", "flushing", "broken", "finished", "wake", "head", "faults",
                 "hold_s", "close_after_flush", "time_scale", "on_record", "emit", "called", "spec_asked")

    def __init__(self, sock, engine: Engine, req: SimRequest, shape, stream: bool,
                 include_usage: bool, head: bytes, faults: Faults | None,
                 received_at: float, on_record, spec_asked: bool = False) -> None:
        self.sock, self.raw, self.engine = sock, sock._sock, engine
        self.req, self.shape, self.head, self.faults = req, shape, head, faults
        self.include_usage = include_usage and not (faults and faults.no_usage)
        self.cache_report = engine.cfg.enable_cache_report
        self.time_scale = engine.cfg.time_scale
        self.received_at = received_at
        self.first_token_at = self.last_token_at = self.done_at = None
        self.chunks = self.owed = 0
        self.hold_s = 0.0
        self.pending: list[bytes] = []
        self.flushing = self.broken = self.finished = self.close_after_flush = False
        self.called = False  # a tool call's first delta has been sent
        self.spec_asked = spec_asked  # the request asked for SGLang's `sglext.spec_tokens_details`
        self.wake = Event()
        self.on_record = on_record
        self.emit = self.on_step_tools if req.output.calls else self.on_step
        req.on_step = (self.on_step_faulty if faults else self.emit) if stream else self.on_step_collect

    # --- called by the engine's loop: never block, never raise ----------------------------------

    def on_step(self, start: int, end: int, done: bool) -> None:
        req, shape = self.req, self.shape
        out = req.output
        rl = out.reasoning_len
        finish = req.finish_reason if done else None
        parts = [self.head, shape.role()] if start == 0 else []
        if start < rl:
            parts.append(shape.reasoning(b"".join(out.escaped[start:min(end, rl)]),
                                         finish if end <= rl else None))
            self.chunks += 1
        if end > rl:
            parts.append(shape.content(b"".join(out.escaped[max(start, rl):end]), finish))
            self.chunks += 1
        if done:
            parts.append(self._tail())
        stamps = (_FIRST | _LAST if start == 0 else _LAST) | (_DONE if done else 0)
        self._write(b"".join(parts), stamps)
        if done:
            self._done()

    def on_step_tools(self, start: int, end: int, done: bool) -> None:
        """`on_step` for a tool-calling answer: reasoning as usual, then per call a delta with
        its name once the name is complete and one with the step's share of its arguments.
        Framing tokens (`<tool_call>`, braces) are output but make no delta, as with SGLang's
        parser, so the first-token stamp waits for the first delta."""
        shape, out = self.shape, self.req.output
        rl = out.reasoning_len
        parts = [self.head, shape.role()] if start == 0 else []
        deltas = 0
        if start < rl:
            parts.append(shape.reasoning(b"".join(out.escaped[start:min(end, rl)])))
            deltas += 1
        for index, call in enumerate(out.calls):
            if call.name_at >= end:
                break
            if start <= call.name_at:
                parts.append(shape.tool_name(index, call.id, call.name))
                deltas += 1
                self.called = True
            low, high = max(start, call.args_from), min(end, call.args_to)
            if low < high:
                parts.append(shape.tool_arguments(index, b"".join(out.escaped[low:high])))
                deltas += 1
        stamps = (_FIRST if deltas and not self.chunks else 0) | (_LAST if deltas else 0)
        self.chunks += deltas
        if done:
            parts.append(self._tail())
            stamps |= _DONE
        if parts:
            self._write(b"".join(parts), stamps)
        if done:
            self._done()

    def on_step_faulty(self, start: int, end: int, done: bool) -> None:
        """`on_step` with this request's faults applied at their positions."""
        f = self.faults
        if start == 0:
            f.place(self.req.limit)
            if f.stall_first_s:
                self.hold_s = f.stall_first_s * self.time_scale
        if f.stall_at is not None and start < f.stall_at <= end and start > 0:
            self.hold_s = f.stall_s * self.time_scale
        if f.malformed_at is not None and start < f.malformed_at <= end and start > 0:
            self._write(httpio.frame(b'data: {"id":"%b","object":"chat.completion.chunk","choices":[{"ind\n\n'
                                     % self.req.rid.encode()), 0)
        if f.error_at is not None and end >= f.error_at and start > 0:
            tail = self.shape.error_event("Simulated engine error (fault injection).",
                                          "InternalServerError", 500)
            if self.shape.done_after_error and not f.no_done:
                tail += self.shape.done()
            self._write(tail + httpio.END_CHUNKS, _DONE)
            self.engine.abort(self.req)
            self._done()
            return
        self.emit(start, end, done)
        if f.drop_at is not None and end >= f.drop_at and not done:
            self.close_after_flush = True
            self.engine.abort(self.req)
            self.wake.set()

    def on_step_collect(self, start: int, end: int, done: bool) -> None:
        if done:
            self._done()

    def _tail(self) -> bytes:
        """Finish chunk, usage chunk, [DONE] and the end of the chunked body, in one piece."""
        req, shape, now = self.req, self.shape, time.time()
        spec = _spec_counts(req, self.engine.cfg.speculative_num_draft_tokens)
        timings = None
        if shape.sends_timings:
            first = self.first_token_at or now
            timings = llamacpp_timings(req.prompt_tokens - req.cached_tokens, req.cached_tokens,
                                       first - self.received_at, req.limit, now - first, spec)
        matched = tokenizer.EOS_TOKEN_ID if req.finish_reason == "stop" else None
        if self.called:  # SGLang: a natural stop after tool calls finishes as "tool_calls"
            reason = "tool_calls" if req.finish_reason == "stop" else req.finish_reason
            parts = [shape.tool_finish(reason, matched, timings)]
        else:
            parts = [shape.finish(req.finish_reason, matched, timings)]
        if self.spec_asked:
            parts.append(shape.spec_chunk(spec))
        if self.include_usage:
            parts.append(shape.usage(req.prompt_tokens, req.limit,
                                     req.cached_tokens if self.cache_report else None,
                                     min(req.limit, req.output.reasoning_len), timings, spec))
        if not (self.faults and self.faults.no_done):
            parts.append(shape.done())
        parts.append(httpio.END_CHUNKS)
        return b"".join(parts)

    def _done(self) -> None:
        self.finished = True
        self.wake.set()

    def _write(self, data: bytes, stamps: int) -> None:
        if self.broken:
            return
        if self.pending or self.flushing or self.hold_s:
            self.pending.append(data)
            self.owed |= stamps
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
            self.owed |= stamps
            self.wake.set()
        elif stamps:
            self._stamp(stamps, time.time())

    def _stamp(self, stamps: int, now: float) -> None:
        if stamps & _FIRST:
            self.first_token_at = now
        if stamps & _LAST:
            self.last_token_at = now
        if stamps & _DONE:
            self.done_at = now
            self.record()

    def record(self) -> None:
        """Hands the finished request to the trace and metrics, once."""
        if self.on_record is not None:
            on_record, self.on_record = self.on_record, None
            on_record(self)

    def _break(self) -> None:
        self.broken = True
        self.engine.abort(self.req)
        self.wake.set()

    # --- the connection's greenlet ----------------------------------------------------------

    def wait(self) -> None:
        """Flushes queued bytes until the request is done or the client has gone.

        A client that hangs up is noticed by a read watcher on the socket (an EOF makes it
        readable), not by polling, so thousands of idle-looking streams cost nothing between
        their chunks.
        """
        watcher = gevent.get_hub().loop.io(self.raw.fileno(), 1)
        watcher.start(self._readable, watcher)
        try:
            while True:
                self.wake.wait()
                self.wake.clear()
                if self.hold_s:
                    gevent.sleep(self.hold_s)
                    self.hold_s = 0.0
                while self.pending and not self.broken:
                    data = b"".join(self.pending)
                    self.pending.clear()
                    owed, self.owed = self.owed, 0
                    self.flushing = True
                    try:
                        self.sock.sendall(data)
                        self._stamp(owed, time.time())
                    except OSError:
                        self._break()
                    finally:
                        self.flushing = False
                if self.close_after_flush:
                    self.broken = True
                    return
                if self.broken or (self.finished and not self.pending):
                    return
        finally:
            watcher.stop()

    def _readable(self, watcher) -> None:
        """The socket became readable mid-request: EOF or reset means the client has gone;
        pipelined bytes are left for the next request (and end the watch)."""
        try:
            gone = self.raw.recv(1, _PEEK) == b""
        except BlockingIOError:
            return
        except OSError:
            gone = True
        watcher.stop()
        if gone:
            self._break()

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
                 trace: TraceWriter | None = None, faults: FaultPicker | None = None) -> None:
        self.cfg = cfg
        self.engine = Engine(cfg)
        self.trace = trace
        self.faults = faults or FaultPicker(())
        self._shape = SHAPES[cfg.flavor]
        self._gates: dict[int, BoundedSemaphore] = {}
        self._gets = {**self._GETS, **self._INFO_GETS[cfg.flavor]}
        self._server = StreamServer((host, port), self._handle)
        self._host = host

    @property
    def port(self) -> int:
        return self._server.server_port

    def start(self) -> None:
        self._server.start()
        httpio.enable_timestamps(self._server.socket)
        self.engine.start()

    def stop(self) -> None:
        self._server.stop(timeout=1)
        self.engine.stop()

    # --- connections ----------------------------------------------------------------------------

    def _handle(self, sock, addr) -> None:
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        reader = httpio.RequestReader(sock)
        try:
            while True:
                request = reader.read_request()
                if request is None or not self._route(sock, request) or not request.keep_alive:
                    return
        except httpio.BadRequest as exc:
            self._send(sock, self._error(400, str(exc), keep_alive=False))
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

    def _json(self, status: int, obj: object, extra: bytes = b"") -> bytes:
        return httpio.json_response(status, obj, extra, server=self._shape.server_header)

    def _error(self, status: int, message: str, err_type: str = "BadRequestError",
               extra: bytes = b"", keep_alive: bool = True) -> bytes:
        return httpio.json_response(status, self._shape.error_body(message, err_type, status),
                                    extra, keep_alive, server=self._shape.server_header)

    def _route(self, sock, request: httpio.Request) -> bool:
        """Answers one request; False when the connection must close."""
        method, path = request.method, request.path
        if path == "/v1/chat/completions":
            if method != "POST":
                return self._send(sock, self._json(405, {"detail": "Method Not Allowed"}))
            return self._chat(sock, request)
        if method == "GET" and path in self._gets:
            return self._send(sock, self._gets[path](self))
        if self.cfg.flavor != "sglang":  # SGLang's own endpoints follow
            return self._send(sock, self._json(404, {"detail": "Not Found"}))
        if path == "/flush_cache" and method in ("GET", "POST"):
            ok = self.engine.flush_cache()
            return self._send(sock, httpio.response(200 if ok else 400, _FLUSH_MESSAGE,
                                                    b"text/plain; charset=utf-8"))
        if path == "/health_generate" and method == "GET":
            return self._send(sock, self._health_generate())
        return self._send(sock, self._json(404, {"detail": "Not Found"}))

    # --- informational endpoints ------------------------------------------------------------------

    def _health(self) -> bytes:
        if self.cfg.flavor == "llamacpp":
            return self._json(200, {"status": "ok"})
        return httpio.response(200, b"", b"text/plain; charset=utf-8")

    def _models(self) -> bytes:
        name = self.cfg.served_model_name
        return self._json(200, {"object": "list", "data": [{
            "id": name, "object": "model", "created": int(time.time()),
            "owned_by": FLAVOURS[self.cfg.flavor].probes.owned_by,
            "root": name, "parent": None, "max_model_len": self.cfg.context_length}]})

    def simulator_info(self) -> dict[str, Any]:
        """What every flavour's info endpoint adds: the simulator's settings and the command
        line's flags that it accepted but does not model."""
        cfg = self.cfg
        return {"flavor": cfg.flavor, "time_scale": cfg.time_scale, "not_modelled": list(cfg.not_modelled),
                "draft_cuda_graph": server_args.draft_graph_captured(cfg), "config": dataclasses.asdict(cfg)}

    def server_info(self) -> dict[str, Any]:
        """Server args as SGLang names them, plus scheduler limits and internal states."""
        cfg = self.cfg
        args = {"model_path": cfg.model_path, "tokenizer_path": cfg.model_path,
                "served_model_name": cfg.served_model_name, "host": self._host, "port": self.port,
                "tp_size": cfg.tp_size, "dp_size": 1, "context_length": cfg.context_length,
                "max_running_requests": cfg.max_running_requests,
                "chunked_prefill_size": cfg.chunked_prefill_size,
                "max_prefill_tokens": cfg.max_prefill_tokens, "page_size": cfg.page_size,
                "stream_interval": cfg.stream_interval,
                "decode_log_interval": cfg.decode_log_interval,
                "kv_cache_dtype": cfg.kv_cache_dtype, "mem_fraction_static": cfg.mem_fraction_static,
                "disable_radix_cache": cfg.disable_radix_cache,
                "enable_cache_report": cfg.enable_cache_report,
                "enable_hierarchical_cache": cfg.enable_hierarchical_cache, "hicache_ratio": cfg.hicache_ratio,
                "speculative_algorithm": cfg.speculative_algorithm,
                "speculative_num_draft_tokens": cfg.speculative_num_draft_tokens,
                "speculative_dflash_block_size": cfg.speculative_dflash_block_size,
                "enable_metrics": True, **cfg.server_args}
        state: dict[str, Any] = {"last_gen_throughput": self.engine.gen_throughput(),
                                 "memory_usage": {}}
        accept = self.engine.stats.spec.lifetime_accept_length
        if accept is not None:  # SGLang leaves the key out until a decode log has run
            state["avg_spec_accept_length"] = accept
        return {**args,
                "max_total_num_tokens": cfg.radix_cache_tokens,
                "max_req_input_len": cfg.context_length - 1,
                "internal_states": [state],
                "version": cfg.version,
                "simulator": self.simulator_info()}

    def _server_info(self) -> bytes:
        return self._json(200, self.server_info())

    def _version(self) -> bytes:
        """vLLM's /version."""
        return self._json(200, {"version": self.cfg.version, "simulator": self.simulator_info()})

    def _props(self) -> bytes:
        """llama-server's /props: its slots, context and build."""
        cfg = self.cfg
        return self._json(200, {
            "default_generation_settings": {"id": 0, "n_ctx": cfg.context_length, "speculative": True,
                                            "params": {"speculative.n_max": cfg.speculative_num_draft_tokens - 1}},
            "total_slots": cfg.max_running_requests, "model_path": cfg.model_path,
            "build_info": f"b0-{cfg.version}", "modalities": {"vision": False, "audio": False},
            "simulator": self.simulator_info()})

    def _model_info(self) -> bytes:
        return self._json(200, {"model_path": self.cfg.model_path,
                                "tokenizer_path": self.cfg.model_path, "is_generation": True,
                                "preferred_sampling_params": None, "weight_version": "default",
                                "has_image_understanding": False, "has_audio_understanding": False,
                                "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]})

    def _metrics(self) -> bytes:
        return httpio.response(200, metrics.render(self.engine),
                               b"text/plain; version=0.0.4; charset=utf-8")

    _GETS = {"/health": _health, "/v1/models": _models, "/metrics": _metrics}
    _INFO_GETS = {  # each flavour's own info endpoints (loadlib/wire/flavours.py's Probes)
        "sglang": {"/get_server_info": _server_info, "/server_info": _server_info,
                   "/get_model_info": _model_info, "/model_info": _model_info},
        "vllm": {"/version": _version},
        "llamacpp": {"/props": _props}}

    def _health_generate(self) -> bytes:
        """Runs a one-token generation through the engine, as SGLang's probe does."""
        req = self.engine.make_request(f"HEALTH_CHECK_{uuid.uuid4().hex}",
                                       [{"role": "user", "content": "ping"}], 1, 0.0, False)
        done = Event()
        req.on_step = lambda start, end, finished: done.set() if finished else None
        self.engine.submit(req)
        if done.wait(timeout=max(20.0, 20.0 * self.cfg.time_scale)):
            return httpio.response(200, b"", b"text/plain; charset=utf-8")
        self.engine.abort(req)
        return httpio.response(503, b"", b"text/plain; charset=utf-8")

    # --- chat -------------------------------------------------------------------------------------

    def _chat(self, sock, request: httpio.Request) -> bool:
        received_at = request.received_at
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
            temperature = body.get("temperature")
            temperature = 1.0 if temperature is None else float(temperature)
            kwargs = body.get("chat_template_kwargs") or {}
            asked = kwargs.get("enable_thinking") if isinstance(kwargs, dict) else None
            thinking = self.engine.cfg.thinking_default if asked is None else asked is True
            faults = self.faults.pick(request.headers.get(FAULT_HEADER))
        except (ValueError, TypeError) as exc:
            return self._send(sock, self._error(400, str(exc)))
        rid = str(request.headers.get("x-request-id") or body.get("rid") or uuid.uuid4().hex)
        rid_header = b"x-request-id: %b\r\n" % rid.encode("latin-1", "replace")
        if faults and faults.http_status:
            return self._send(sock, self._fault_status(faults, rid_header))
        natural = request.headers.get("x-sim-natural-tokens")
        try:
            req = self.engine.make_request(rid, messages, max_tokens, temperature, thinking,
                                           int(natural) if natural and natural.isdigit() else None,
                                           body.get("tools"), body.get("tool_choice", "auto"),
                                           body.get("ignore_eos") is True)
        except ValueError as exc:
            return self._send(sock, self._error(400, str(exc), extra=rid_header))
        if faults and faults.count_skew:
            req.uncounted = round(req.limit * faults.count_skew)
        error = self._check_length(req, max_tokens, bool(faults and faults.too_long))
        if error:
            return self._send(sock, self._error(400, error, extra=rid_header))
        stream = bool(body.get("stream"))
        options = body.get("stream_options") or {}
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        model = str(body.get("model") or self.cfg.served_model_name)
        shape = self._shape(rid, model, int(received_at))
        head = httpio.stream_head(rid_header, server=shape.server_header)
        delivery = _Delivery(sock, self.engine, req, shape, stream, include_usage, head, faults,
                             received_at, self._record, body.get("return_spec_tokens_details") is True)
        gate = self._front_queue(faults.front_queue) if faults and faults.front_queue else None
        if gate is not None:  # held before the server, which receives the request only now
            gate.acquire()
            delivery.received_at = time.time()
        if faults and faults.cache_drop:
            self.engine.radix.reset()
        try:
            self.engine.submit(req)
            delivery.wait()
        finally:
            if gate is not None:
                gate.release()
        if delivery.broken:
            delivery.record()
            return False
        ok = True
        if not stream:
            ok = self._send(sock, self._json(200, self._full_response(delivery), rid_header))
            now = time.time()
            delivery.first_token_at = delivery.last_token_at = delivery.done_at = now
        delivery.record()
        return ok

    def _front_queue(self, admitted: int) -> BoundedSemaphore:
        """The `front_queue` fault's queue that lets `admitted` requests through at once."""
        return self._gates.setdefault(admitted, BoundedSemaphore(admitted))

    def _record(self, delivery: _Delivery) -> None:
        stats = self.engine.stats
        if delivery.first_token_at is not None:
            stats.ttft.observe(delivery.first_token_at - delivery.received_at)
        if delivery.done_at is not None:
            stats.e2e.observe(delivery.done_at - delivery.received_at)
        if self.trace is not None:
            self.trace.write(delivery.trace_record())

    def _fault_status(self, faults: Faults, rid_header: bytes) -> bytes:
        status = faults.http_status
        extra = rid_header
        if faults.retry_after is not None:
            extra += b"retry-after: %d\r\n" % max(0, round(faults.retry_after))
        kinds = {500: ("Internal server error (fault injection).", "InternalServerError"),
                 503: ("Service unavailable (fault injection).", "ServiceUnavailableError"),
                 429: ("Too many requests (fault injection).", "RateLimitError")}
        message, err_type = kinds.get(status, ("Error (fault injection).", "Error"))
        return self._error(status, message, err_type, extra)

    def _check_length(self, req: SimRequest, max_tokens: int | None, force: bool) -> str | None:
        ctx = self.cfg.context_length
        if req.prompt_tokens >= ctx or force:
            return (f"The input ({max(req.prompt_tokens, ctx)} tokens) is longer than the model's "
                    f"context length ({ctx} tokens).")
        if max_tokens is not None and req.prompt_tokens + max_tokens > ctx:
            return (f"Requested token count exceeds the model's maximum context length of {ctx} "
                    f"tokens. You requested a total of {req.prompt_tokens + max_tokens} tokens: "
                    f"{req.prompt_tokens} tokens from the input messages and {max_tokens} tokens "
                    f"for the completion. Please reduce the number of tokens in the input "
                    f"messages or the completion to fit within the limit.")
        return None

    def _full_response(self, delivery: _Delivery) -> dict[str, Any]:
        req, shape = delivery.req, delivery.shape
        texts, rl, limit = req.output.texts, req.output.reasoning_len, req.limit
        answer: str | None = "".join(texts[rl:limit]) if limit > rl else ""
        reasoning = "".join(texts[:min(rl, limit)]) or None
        calls = [{"id": c.id, "function": {"name": c.name,
                                           "arguments": "".join(texts[c.args_from:min(c.args_to, limit)])}}
                 for c in req.output.calls if c.name_at < limit]
        reason = req.finish_reason
        if calls:
            answer, reason = None, "tool_calls" if reason == "stop" else reason
        usage = {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + req.limit,
                 "completion_tokens": req.limit,
                 "prompt_tokens_details": ({"cached_tokens": req.cached_tokens}
                                           if self.cfg.enable_cache_report else None),
                 "reasoning_tokens": min(req.limit, rl)}
        matched = tokenizer.EOS_TOKEN_ID if req.finish_reason == "stop" else None
        elapsed = time.time() - delivery.received_at
        timings = llamacpp_timings(req.prompt_tokens - req.cached_tokens, req.cached_tokens,
                                   0.0, req.limit, elapsed, _spec_counts(req, self.cfg.speculative_num_draft_tokens))
        return shape.response(answer, reasoning, reason, matched, usage, timings, calls or None)
