"""Reads a finished chat-completion SSE stream into the protocol's raw per-request figures.

Runs once per request after the last byte arrived, so it can afford a full JSON parse; the
timing comes from the arrival time of the buffer in which each event ended. It accepts the
wire shapes of SGLang (`reasoning_content`, usage chunk with empty choices, `[DONE]`), vLLM
(`delta.reasoning`, finish on the last token chunk) and llama.cpp (role chunk with
`content: null`, `:` comment lines, `timings`, an `error` event without `[DONE]`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Sequence

import orjson

MAX_LINE_BYTES = 1 << 20  # no chat-completion event comes near this; a longer line is a fault

@dataclass(slots=True)
class StreamSummary:
    """What a stream carried. Times are wall clock (epoch seconds); None where never seen."""

    first_token_at: float | None = None
    last_token_at: float | None = None
    done_at: float | None = None  # arrival of the `[DONE]` line
    end_at: float | None = None  # arrival of the last byte
    chunks: int = 0  # events with non-empty content, reasoning or tool-call deltas
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    error: str | None = None  # an in-stream error event or malformed data
    output_sha: str | None = None

    @property
    def completion_tokens(self) -> int | None:
        return _int_or_none(self.usage, "completion_tokens")

    @property
    def prompt_tokens(self) -> int | None:
        return _int_or_none(self.usage, "prompt_tokens")

    @property
    def cached_tokens(self) -> int | None:
        details = (self.usage or {}).get("prompt_tokens_details") or {}
        value = details.get("cached_tokens") if isinstance(details, dict) else None
        return value if isinstance(value, int) else None


def parse_stream(pieces: Sequence[bytes], arrivals: Sequence[float]) -> StreamSummary:
    """Parses SSE `pieces` (body bytes in arrival order) with each piece's arrival time."""
    summary = StreamSummary(end_at=arrivals[-1] if arrivals else None)
    body = b"".join(pieces)
    ends = _cumulative_ends(pieces)
    hasher = hashlib.sha256()
    produced = False
    piece_index = 0
    pos = 0
    size = len(body)
    while pos < size:
        eol = body.find(b"\n", pos)
        line_end = size if eol < 0 else eol
        if line_end - pos > MAX_LINE_BYTES:
            summary.error = summary.error or "SSE line over 1 MiB"
            pos = line_end + 1
            continue
        line = body[pos:line_end]
        pos = line_end + 1
        if not line or line[:1] == b":":
            continue
        if line[-1:] == b"\r":
            line = line[:-1]
        if line.startswith(b"data:"):
            payload = line[5:].lstrip()
        elif line.startswith(b"error:"):
            summary.error = summary.error or _error_reason(line[6:].strip())
            continue
        else:
            continue  # `event:`, `id:`, `retry:` fields carry nothing we measure
        while piece_index < len(ends) - 1 and ends[piece_index] <= line_end:
            piece_index += 1
        arrived = arrivals[piece_index]
        if payload == b"[DONE]":
            summary.done_at = arrived
            break
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            summary.error = summary.error or _undecodable(payload)
            continue
        if not isinstance(event, dict):
            summary.error = summary.error or "malformed JSON in stream"
            continue
        if "error" in event and not event.get("choices"):
            summary.error = summary.error or _error_reason(event["error"])
            continue
        if event.get("usage"):
            summary.usage = event["usage"]
        for choice in event.get("choices") or ():
            if _consume_delta(choice.get("delta") or {}, hasher):
                summary.chunks += 1
                produced = True
                if summary.first_token_at is None:
                    summary.first_token_at = arrived
                summary.last_token_at = arrived
            if choice.get("finish_reason"):
                summary.finish_reason = choice["finish_reason"]
    if produced:
        summary.output_sha = hasher.hexdigest()[:16]
    return summary


def _consume_delta(delta: dict[str, Any], hasher: "hashlib._Hash") -> bool:
    """Feeds a delta's output into the hash; True if it carried any (text, reasoning, tools)."""
    produced = False
    for key in ("reasoning_content", "reasoning", "content"):
        text = delta.get(key)
        if text:
            hasher.update(text.encode("utf-8", "surrogatepass"))
            produced = True
    for call in delta.get("tool_calls") or ():
        function = call.get("function") or {}
        for part in (function.get("name"), function.get("arguments")):
            if part:
                hasher.update(part.encode("utf-8", "surrogatepass"))
                produced = True
    return produced


def _cumulative_ends(pieces: Sequence[bytes]) -> list[int]:
    ends, total = [], 0
    for piece in pieces:
        total += len(piece)
        ends.append(total)
    return ends


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
        inner = error.get("error", error)
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
            inner = data.get("error", data)
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


def _int_or_none(usage: dict[str, Any] | None, key: str) -> int | None:
    value = (usage or {}).get(key)
    return value if isinstance(value, int) else None
