"""Reads a chat-completion SSE stream as it arrives into the protocol's raw per-request figures.

`StreamReader.feed` takes each received piece of the body as it comes: SSE framing, one JSON
parse per event, first-token detection at the piece that carries it, running counts and the
output hash, all in work proportional to the piece. Nothing is kept but an incomplete last line
(at most `MAX_LINE_BYTES`), so a request's memory does not grow with its answer and its end
costs nothing. It accepts the wire shapes of SGLang (`reasoning_content`, usage chunk with
empty choices, `[DONE]`), vLLM (`delta.reasoning`, finish on the last token chunk) and
llama.cpp (role chunk with `content: null`, `:` comment lines, `timings`, an `error` event
without `[DONE]`): their keys come from `loadlib.wire.flavours`. Anything else, however
shaped, becomes a reason in `error`, never an exception.

With thinking, a stream carries reasoning first and the answer after it: `first_answer_at` times
the first chunk with non-empty `content` or a tool call (the time to first output, TTFO, where
`first_token_at` times the first chunk of either), and `reasoning_tokens` reads the server's
count from the usage chunk.

Asked to (`chunk_times`, the run's `--chunk-times`), it keeps each output chunk's arrival stamp:
one list append per chunk; a reader not asked keeps nothing per chunk.

The server's account of the request's speculative decoding (`spec_account`) is read from the
chunks without choices only, which come at the stream's end: the usage chunk and what a server
adds beside it. Token chunks pay nothing for it.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, NamedTuple

import orjson

from loadlib.figures.live import LiveCounters
from loadlib.wire.flavours import DELTA_TEXT_KEYS, ERROR_KEY

MAX_LINE_BYTES = 1 << 20  # no chat-completion event comes near this; a longer line is a fault
HEAD_BYTES = 48  # body bytes kept to say what a response that is not an event stream was
_loads = orjson.loads
_ANSWER_KEY = DELTA_TEXT_KEYS[-1]  # `content`: the answer; the keys before it carry reasoning
_JSONDecodeError = orjson.JSONDecodeError


class StreamReader:
    """What a stream carried, read piece by piece. Times are wall clock (epoch seconds) of the
    piece in which each event's line ended; None where never seen."""

    __slots__ = ("sent_at", "content_type", "first_token_at", "first_answer_at", "chunks_before_answer",
                 "last_token_at", "done_at", "end_at",
                 "ended", "events", "chunks", "output_chars", "first_read_events", "usage",
                 "finish_reason", "error", "spec", "chunk_times", "head", "_head_room", "_partial", "_skipping",
                 "_hasher", "_live", "_answer", "_reasoning")

    def __init__(self, sent_at: float = 0.0, content_type: str | None = "text/event-stream",
                 live: LiveCounters | None = None, keep_text: bool = False, chunk_times: bool = False) -> None:
        self.sent_at = sent_at  # for the live TTFT of the first token
        self.content_type = content_type
        self.first_token_at: float | None = None
        self.first_answer_at: float | None = None  # first chunk with content or a tool call (not reasoning)
        self.chunks_before_answer: int | None = None  # output chunks before it: reasoning-only ones
        self.last_token_at: float | None = None
        self.done_at: float | None = None  # arrival of the `[DONE]` line
        self.end_at: float | None = None  # arrival of the last byte
        self.ended = False  # `[DONE]` was read: the stream is over whatever follows
        self.events = 0  # `data:` lines
        self.chunks = 0  # events with non-empty content, reasoning or tool-call deltas
        self.output_chars = 0  # characters of that output (text, reasoning, tool calls)
        self.first_read_events: int | None = None  # output events timed with the first token
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None  # the first in-stream error event or malformed data
        self.spec: SpecAccount | None = None  # the server's account of speculative decoding
        # each output chunk's arrival stamp (those read together share theirs), kept only when asked
        self.chunk_times: list[float] | None = [] if chunk_times else None
        self.head = b""  # the body's first bytes (one more than shown), kept only when the
        self._head_room = 0 if _is_event_stream(content_type) else HEAD_BYTES + 1  # type is not SSE
        self._partial: bytearray | None = None  # an incomplete last line
        self._skipping = False  # inside a line over MAX_LINE_BYTES: dropped up to its end
        self._hasher = hashlib.sha256()
        self._live = live if live is not None else LiveCounters()
        # the answer's and the reasoning's text pieces, joined once at the end (`text`), kept only
        # when asked: a reader's memory otherwise does not grow with the answer
        self._answer: list[str] | None = [] if keep_text else None
        self._reasoning: list[str] | None = [] if keep_text else None

    # --- figures ------------------------------------------------------------------------------

    @property
    def completion_tokens(self) -> int | None:
        return _int_or_none(self.usage, "completion_tokens")

    @property
    def prompt_tokens(self) -> int | None:
        return _int_or_none(self.usage, "prompt_tokens")

    @property
    def cached_tokens(self) -> int | None:
        details = (self.usage or {}).get("prompt_tokens_details")
        return _int_or_none(details if isinstance(details, dict) else None, "cached_tokens")

    @property
    def reasoning_tokens(self) -> int | None:
        """The server's count of reasoning tokens among `completion_tokens`: OpenAI's and vLLM's
        `usage.completion_tokens_details.reasoning_tokens`, else SGLang's `usage.reasoning_tokens`;
        None where the server gives neither."""
        usage = self.usage or {}
        details = usage.get("completion_tokens_details")
        count = _int_or_none(details if isinstance(details, dict) else None, "reasoning_tokens")
        return count if count is not None else _int_or_none(usage, "reasoning_tokens")

    @property
    def text(self) -> str:
        """The answer (`content`) as it came, whole ("" unless the reader keeps text)."""
        return "".join(self._answer or ())

    @property
    def reasoning_text(self) -> str:
        """The reasoning before the answer (`reasoning_content`, vLLM's `reasoning`)."""
        return "".join(self._reasoning or ())

    @property
    def output_sha(self) -> str | None:
        """sha256 (16 hex) of the output text, the same however the server split it."""
        return self._hasher.hexdigest()[:16] if self.chunks else None

    @property
    def format_error(self) -> str | None:
        """Why the body was no event stream at all (a proxy's login page, a JSON error body)."""
        if self.events or _is_event_stream(self.content_type):
            return None
        kind = f"content-type {self.content_type[:60]}" if self.content_type else "no content-type"
        if not self.head:
            return f"not an event stream: {kind}, empty body"
        text = " ".join(self.head[:HEAD_BYTES].decode("utf-8", "replace").split())
        more = "..." if len(self.head) > HEAD_BYTES else ""
        return f"not an event stream: {kind}, body starts {text!r}{more}"

    # --- reading ------------------------------------------------------------------------------

    def feed(self, data: bytes, t: float) -> None:
        """Reads one received piece of the body (split anywhere), arrived at `t`: its complete
        lines now, an incomplete last line once the rest of it comes."""
        self.end_at = t
        if self._head_room:
            self.head += data[:self._head_room]
            self._head_room = HEAD_BYTES + 1 - len(self.head)
        if self._partial is not None:
            data = self._after_partial(data)
        pos, size = 0, len(data)
        find, startswith = data.find, data.startswith
        while pos < size:
            eol = find(b"\n", pos)
            if eol < 0:
                if size - pos > MAX_LINE_BYTES:
                    self._drop_line()
                else:
                    self._partial = bytearray(memoryview(data)[pos:])
                return
            if eol - pos < 2:  # the blank line that ends each event (with its CR, if any)
                pass
            elif eol - pos > MAX_LINE_BYTES:
                self._fail("SSE line over 1 MiB")
            elif startswith(b"data:", pos):
                self._event(data[pos + 5:eol], t)
            elif startswith(b"error:", pos):
                self._fail(_error_reason(data[pos + 6:eol].strip()))
            pos = eol + 1  # `:` comments, `event:`, `id:`, `retry:`: nothing to measure

    def _after_partial(self, data: bytes) -> bytes:
        """`data` with the pending incomplete line in front once that line's end has come,
        else b"" (the line grows in a bytearray, so a long line split into many pieces costs
        its length, not its length squared)."""
        eol = data.find(b"\n")
        if eol < 0:
            if not self._skipping:
                self._partial += data
                if len(self._partial) > MAX_LINE_BYTES:
                    self._drop_line()
            return b""
        pending, self._partial = self._partial, None
        if self._skipping:
            self._skipping = False
            return data[eol + 1:]
        return bytes(pending) + data

    def _drop_line(self) -> None:
        self._fail("SSE line over 1 MiB")
        self._partial = bytearray()
        self._skipping = True

    def _event(self, payload: bytes, t: float) -> None:
        """One `data:` payload (with its leading space and trailing CR, both JSON whitespace).
        The per-chunk path is kept in this one function on purpose: it runs for every chunk."""
        if self.ended:
            return
        self.events += 1
        try:
            event = _loads(payload)
        except _JSONDecodeError:
            payload = payload.strip()
            if payload == b"[DONE]":
                self.done_at, self.ended = t, True
            elif payload:  # an empty `data:` line carries nothing (a keep-alive), not a fault
                self._fail(_undecodable(payload))
            return
        if type(event) is not dict:
            self._fail("malformed event: not an object")
            return
        choices = event.get("choices")
        if choices:
            if type(choices) is not list:
                self._fail("malformed event: choices is not a list")
                return
            for choice in choices:
                if type(choice) is not dict:
                    index = next(i for i, c in enumerate(choices) if c is choice)
                    self._fail(f"malformed event: choices[{index}] is not an object")
                    continue
                delta = choice.get("delta")
                if delta:
                    if type(delta) is not dict:
                        self._fail("malformed event: delta is not an object")
                        continue
                    produced = False  # output in this delta: text, reasoning, tool calls
                    for key in DELTA_TEXT_KEYS:
                        text = delta.get(key)
                        if text:
                            if type(text) is not str:
                                self._fail(f"malformed event: delta.{key} is not a string")
                                break
                            self._hasher.update(text.encode("utf-8", "surrogatepass"))
                            self.output_chars += len(text)
                            if self._answer is not None:
                                (self._answer if key is _ANSWER_KEY else self._reasoning).append(text)
                            produced = True
                    calls = delta.get("tool_calls")
                    if calls and self._tool_calls(calls):
                        produced = True
                    if produced:  # an output chunk; the first one times TTFT
                        self.chunks += 1
                        self.last_token_at = t
                        self._live.chunks += 1
                        if self.chunk_times is not None:
                            self.chunk_times.append(t)
                        if self.first_token_at is None:
                            self.first_token_at = t
                            self.first_read_events = 1
                            self._live.first_token(t - self.sent_at)
                        elif t == self.first_token_at:  # read with the first: it carries their stamp
                            self.first_read_events += 1
                        if self.first_answer_at is None and (type(text) is str and text or calls):
                            self.first_answer_at = t  # `text` is `content`, the last key: an answer (TTFO)
                            self.chunks_before_answer = self.chunks - 1
                finish = choice.get("finish_reason")
                if finish:
                    if type(finish) is str:
                        self.finish_reason = finish
                    else:
                        self._fail("malformed event: finish_reason is not a string")
        elif ERROR_KEY in event:
            self._fail(_error_reason(event[ERROR_KEY]))
            return
        else:  # no choices: the usage chunk, or one a server adds at the end (SGLang's sglext)
            account = spec_account(event)
            if account is not None:
                self.spec = account
        usage = event.get("usage")
        if usage:
            if type(usage) is dict:
                self.usage = usage
            else:
                self._fail("malformed event: usage is not an object")

    def _tool_calls(self, calls: Any) -> bool:
        if type(calls) is not list:
            self._fail("malformed event: delta.tool_calls is not a list")
            return False
        produced = False
        for index, call in enumerate(calls):
            function = call.get("function") if type(call) is dict else None
            if function is None:
                if type(call) is not dict:
                    self._fail(f"malformed event: delta.tool_calls[{index}] is not an object")
                continue
            if type(function) is not dict:
                self._fail(f"malformed event: delta.tool_calls[{index}].function is not an object")
                continue
            for key in ("name", "arguments"):
                part = function.get(key)
                if part:
                    if type(part) is not str:
                        self._fail(f"malformed event: delta.tool_calls[{index}].function.{key} is not a string")
                        continue
                    self._hash(part)
                    produced = True
        return produced

    def _hash(self, text: str) -> None:
        self._hasher.update(text.encode("utf-8", "surrogatepass"))
        self.output_chars += len(text)

    def _fail(self, reason: str) -> None:
        """Keeps the first thing that was wrong; reading goes on (later events still count)."""
        if self.error is None:
            self.error = reason


class SpecAccount(NamedTuple):
    """What a server says of one request's speculative decoding (the record's `spec_*` fields)."""

    verify_steps: int  # the target's passes that checked a draft (llama.cpp: all its passes, see below)
    draft_tokens: int  # draft tokens proposed
    accepted_tokens: int  # of those, accepted (the token each step samples itself not counted)
    histogram: str | None  # verify steps that accepted exactly 0, 1, 2, ... drafts: "12,3,0,5"


def spec_account(event: dict[str, Any]) -> SpecAccount | None:
    """The server's account of the request's speculative decoding in a chunk, in the shape of
    whichever server sent it; None where the chunk has none, or a malformed one (the figures are
    the server's: a bad one is left out, it never fails the request).

    - llama.cpp (tools/server/server-common.cpp, `server_slot_stats::to_json`): the last chunk's
      `timings` has `draft_n` (draft tokens) and `draft_n_accepted`, when the request drafted at
      all. Its verify steps (`n_draft_verif_steps`) are not sent: they are the target's decode
      passes, each of which makes one token of its own beside the drafts it accepts, after the
      first token, which comes from the prompt's pass (server-context.cpp, `n_gen_steps`). So
      passes = `predicted_n` - 1 - `draft_n_accepted`; a pass without a draft (llama-server drafts
      at most the tokens left but one) counts as a step that accepted none.
    - SGLang (0.5.23: entrypoints/openai/serving_chat.py, protocol.py `SpecTokensDetails`): asked
      with `return_spec_tokens_details`, a chunk without choices after the finish chunk has
      `sglext.spec_tokens_details`: `spec_verify_ct`, `spec_num_proposed_drafts`,
      `spec_num_correct_drafts` and `spec_correct_drafts_histogram` (index = drafts accepted).
    - vLLM (0.29 to 0.34: entrypoints/generate/base/protocol.py `SpeculativeDecodingMetrics`):
      started with `--per-request-spec-decode-metrics summary` (or `detailed`), its usage chunk has
      `metrics.speculative_decoding`: `num_spec_steps`, `num_draft_tokens`,
      `num_accepted_draft_tokens` and `acceptance_histogram` (index = drafts accepted).
    """
    timings = event.get("timings")
    if type(timings) is dict and "draft_n" in timings:
        drafts, accepted, predicted = (_count(timings, key) for key in ("draft_n", "draft_n_accepted", "predicted_n"))
        if drafts is None or accepted is None or predicted is None or predicted - 1 < accepted:
            return None
        return SpecAccount(predicted - 1 - accepted, drafts, accepted, None)
    details = _member(event, "sglext", "spec_tokens_details")
    if details is not None:
        return _account(details, "spec_verify_ct", "spec_num_proposed_drafts", "spec_num_correct_drafts",
                        "spec_correct_drafts_histogram")
    details = _member(event, "metrics", "speculative_decoding")
    if details is not None:
        return _account(details, "num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens",
                        "acceptance_histogram")
    return None


def _member(event: dict[str, Any], outer: str, inner: str) -> dict[str, Any] | None:
    """`event[outer][inner]` when it is an object (or a list of one: SGLang's shape for n > 1)."""
    holder = event.get(outer)
    value = holder.get(inner) if type(holder) is dict else None
    if type(value) is list and len(value) == 1:
        value = value[0]
    return value if type(value) is dict else None


def _account(details: dict[str, Any], *keys: str) -> SpecAccount | None:
    """The account under the server's names for verify steps, draft tokens, accepted drafts and
    the histogram (an empty or malformed histogram is left out, the counts kept)."""
    verify_steps, draft_tokens, accepted = (_count(details, key) for key in keys[:3])
    if verify_steps is None or draft_tokens is None or accepted is None:
        return None
    bins = details.get(keys[3])
    valid = type(bins) is list and bins and all(type(n) is int and n >= 0 for n in bins)
    return SpecAccount(verify_steps, draft_tokens, accepted, ",".join(map(str, bins)) if valid else None)


def _count(values: dict[str, Any], key: str) -> int | None:
    value = values.get(key)
    return value if type(value) is int and value >= 0 else None


def parse_stream(pieces: Iterable[bytes], arrivals: Iterable[float]) -> StreamReader:
    """Reads a whole SSE body given as pieces with each piece's arrival time."""
    reader = StreamReader()
    for piece, arrived in zip(pieces, arrivals):
        reader.feed(piece, arrived)
    return reader


def _is_event_stream(content_type: str | None) -> bool:
    return content_type is not None and "text/event-stream" in content_type.lower()


def _undecodable(payload: bytes) -> str:
    """Why a `data:` payload is not JSON: bytes that are not UTF-8, or broken JSON."""
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid UTF-8 in stream"
    return "malformed JSON in stream"


def _error_reason(error: Any) -> str:
    """A short, stable reason from the error shapes servers send (flat, nested, raw text)."""
    if isinstance(error, (bytes, str)):
        try:
            error = orjson.loads(error)
        except orjson.JSONDecodeError:
            text = error.decode("utf-8", "replace") if isinstance(error, bytes) else error
            return f"stream error: {text[:160]}"
    if isinstance(error, dict):
        inner = error.get(ERROR_KEY, error)
        if isinstance(inner, dict):
            message = inner.get("message") or inner.get("msg") or inner.get("type") or "unknown"
        else:
            message = inner
        return f"stream error: {str(message)[:160]}"
    return f"stream error: {str(error)[:160]}"


def http_error_reason(status: int, body: bytes, retry_after: str | None = None) -> str:
    """`http STATUS: message` from SGLang's flat, OpenAI's nested, or a non-JSON error body.

    A `Retry-After` value (429, 503) is kept in the reason: it says the server shed the load.
    """
    message = ""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        message = body.decode("utf-8", "replace").strip()
    else:
        if isinstance(data, dict):
            inner = data.get(ERROR_KEY, data)
            if isinstance(inner, dict):
                message = str(inner.get("message") or inner.get("detail") or inner.get("msg") or "")
            else:
                message = str(inner)
            if not message and "detail" in data:
                message = str(data["detail"])
    message = " ".join(message.split())[:160]
    reason = f"http {status}: {message}" if message else f"http {status}"
    if retry_after:
        reason += f" (Retry-After: {retry_after[:40]})"
    return reason


def _int_or_none(values: dict[str, Any] | None, key: str) -> int | None:
    value = (values or {}).get(key)
    return value if type(value) is int else None
