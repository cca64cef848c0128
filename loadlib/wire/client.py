"""The streaming chat-completions client: one request in, what the wire did with it out (an
`Exchange`: what was asked and what was measured). It knows nothing of the run: the request's
label and its record are the run's (`loadlib.records.RequestRecord.of`).

It never raises for a failed request: every outcome, including a refused connection, an HTTP
error, a 200 that is no event stream, a malformed event, a stream without usage or with a single
token, becomes an exchange with an `error` reason. Only such error-free records enter the
protocol's figures. The stream is read as it arrives (`loadlib.wire.sse.StreamReader`), which also
keeps this process's live counters (`loadlib.figures.live.COUNTERS`) up to date.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

import orjson

from loadlib.figures import live
from loadlib.records import Exchange, chunk_gaps_text
from loadlib.wire.connection import BodyReader, Collector, Connection, Endpoint, Response, TransportError
from loadlib.wire.sse import StreamReader, http_error_reason

CHAT_PATH = "/v1/chat/completions"
# SGLang's request field that has it send its account of the request's speculative decoding
# (sglext.spec_tokens_details, read by `loadlib.wire.sse.spec_account`; protocol.py of SGLang 0.5.23)
SPEC_DETAILS_FIELD = "return_spec_tokens_details"
ERROR_BODY_BYTES = 65536  # of a non-200 answer, enough for its reason; the rest is dropped


# The protocol's request defaults, defined here once (options, profiles and the client use them).
DEFAULT_MAX_TOKENS = 512
DEFAULT_THINKING = "off"  # "on", "off", or "server": no chat_template_kwargs sent


@dataclass(frozen=True, slots=True)
class ChatSettings:
    """Request parameters shared by every request of a run (the protocol's defaults)."""

    model: str
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    thinking: str = DEFAULT_THINKING
    api_key: str | None = None
    timeout_s: float = 900.0
    verify_tls: bool = True
    spec_details: bool = False  # ask for the server's account of speculative decoding (`SPEC_DETAILS_FIELD`)
    chunk_times: bool = False  # keep each request's gaps between chunks (`Exchange.chunk_gaps_ms`)


def chat_body(settings: ChatSettings, messages: list[dict[str, Any]], max_tokens: int | None = None,
              thinking: str | None = None, **extra: Any) -> dict[str, Any]:
    """The protocol's request body: streaming with usage, temperature 0, thinking switch.

    `thinking` (default the settings') "on"/"off" sends `chat_template_kwargs.enable_thinking`;
    "server" sends no `chat_template_kwargs`, the thread script's exact payload. With the settings'
    `spec_details` it asks SGLang for its account of speculative decoding (`SPEC_DETAILS_FIELD`)."""
    body: dict[str, Any] = {
        "model": settings.model,
        "messages": messages,
        "max_tokens": max_tokens or settings.max_tokens,
        "temperature": settings.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    mode = thinking or settings.thinking
    if mode != "server":
        body["chat_template_kwargs"] = {"enable_thinking": mode == "on"}
    if settings.spec_details:
        body[SPEC_DETAILS_FIELD] = True
    body.update(extra)
    return body


class ChatClient:
    """Sends streaming chat completions over one keep-alive connection.

    `live_counters` are kept up to date as streams run (default: this process's `live.COUNTERS`).
    """

    def __init__(self, base_url: str, settings: ChatSettings,
                 live_counters: live.LiveCounters | None = None) -> None:
        self.settings = settings
        self.live = live_counters if live_counters is not None else live.COUNTERS
        self.connection = Connection(Endpoint.parse(base_url), timeout=settings.timeout_s,
                                     verify_tls=settings.verify_tls)
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if settings.api_key:
            self._headers["Authorization"] = f"Bearer {settings.api_key}"

    def stream(self, body: dict[str, Any], request_id: str, keep_text: bool = False,
               headers: dict[str, str] | None = None) -> Exchange:
        """Sends one request and returns what happened to it (never raises for a failed request);
        with `keep_text` the exchange holds the answer's `text` and `reasoning_text`; `headers` are
        this request's own (a session's sticky routing key). This is the
        transport only: `loadlib.LLMUser.chat` also makes its record, counts it in Locust's stats
        and keeps it in the run's journal.

        Whatever goes wrong, even a bug of this client on some payload, ends as this request's
        failed exchange: one request must not stop a run or leave its round waiting.
        """
        exchange = Exchange.asking(body)
        exchange.sent_at = time.time()  # replaced by the send time when the request went out
        self.live.stream_started()
        try:
            self._exchange(exchange, body, request_id, keep_text, headers or {})
        except Exception as exc:  # noqa: BLE001 - see the docstring
            self.connection.close()
            exchange.error = self._redacted(f"client error: {type(exc).__name__}: {exc}"[:200])
        finally:
            self.live.stream_ended(exchange.error is not None, exchange.completion_tokens, exchange.chunks)
        return exchange

    def _exchange(self, exchange: Exchange, body: dict[str, Any], request_id: str, keep_text: bool,
                  own_headers: dict[str, str]) -> None:
        """Sends the request and fills the exchange from the response as it was read."""
        headers = {**self._headers, **own_headers, "X-Request-Id": request_id}
        data = orjson.dumps(body)
        try:
            response = self.connection.request("POST", CHAT_PATH, data, headers,
                                               reader=lambda answer: self._reader(answer, keep_text))
        except TransportError as exc:
            exchange.total_s = time.time() - exchange.sent_at  # how long it took to fail
            exchange.error = self._redacted(str(exc))
            return
        exchange.sent_at = response.sent_at
        exchange.http_status = response.status
        key = self.settings.api_key
        if key and response.status != 200:  # an auth error may echo the key: never keep it
            response.pieces = [response.body.replace(key.encode(), b"***")]
        fill_exchange(exchange, response)
        if exchange.error:
            exchange.error = self._redacted(exchange.error)

    def _reader(self, response: Response, keep_text: bool) -> BodyReader:
        """A 200 is read as an event stream as it arrives; any other answer is an error body."""
        if response.status == 200:
            return StreamReader(response.sent_at, response.headers.get("content-type"), self.live, keep_text,
                                self.settings.chunk_times)
        return Collector(response, ERROR_BODY_BYTES)

    def _redacted(self, reason: str) -> str:
        """A failure reason without the API key (a server may echo it in an error message)."""
        key = self.settings.api_key
        return reason.replace(key, "***") if key and key in reason else reason

    def close(self) -> None:
        self.connection.close()


def fill_exchange(exchange: Exchange, response: Response) -> None:
    """Copies a response's figures into its exchange and decides whether it is valid."""
    if response.status != 200:
        exchange.error = http_error_reason(response.status, response.body, response.headers.get("retry-after"))
        if response.arrivals:
            exchange.total_s = response.arrivals[-1] - response.sent_at
        return
    stream = cast(StreamReader, response.reader)  # what `ChatClient._reader` gives a 200
    sent = response.sent_at
    if stream.first_token_at is not None:
        exchange.ttft_s = stream.first_token_at - sent
        exchange.last_chunk_s = stream.last_token_at - sent
    end = stream.done_at if stream.done_at is not None else stream.end_at
    if end is not None:
        exchange.total_s = end - sent
    exchange.completion_tokens = stream.completion_tokens
    exchange.prompt_tokens = stream.prompt_tokens
    exchange.cached_tokens = stream.cached_tokens
    exchange.chunks = stream.chunks
    exchange.finish_reason = stream.finish_reason
    exchange.output_sha = stream.output_sha
    exchange.text, exchange.reasoning_text = stream.text, stream.reasoning_text
    exchange.first_read_events = stream.first_read_events
    if stream.first_answer_at is not None and (stream.chunks_before_answer or exchange.thinking):
        exchange.ttfo_s = stream.first_answer_at - sent
    exchange.reasoning_tokens = stream.reasoning_tokens
    if stream.chunk_times is not None:
        exchange.chunk_gaps_ms = chunk_gaps_text(stream.chunk_times)
    if stream.spec is not None:
        (exchange.spec_verify_steps, exchange.spec_draft_tokens, exchange.spec_accepted_tokens,
         exchange.spec_accept_histogram) = stream.spec
    transport = response.error
    if transport == "timeout mid-stream" and stream.first_token_at is None:
        transport = "timeout before first token"
    exchange.error = (transport or stream.format_error or stream.error
                      or _missing_piece(stream.usage, stream.first_token_at, stream.done_at,
                                        exchange.completion_tokens))


def _missing_piece(usage: dict | None, first_token_at: float | None, done_at: float | None,
                   completion_tokens: int | None) -> str | None:
    """The protocol's validity rule: a first token, a usage chunk, comp > 1, and a `[DONE]`."""
    if usage is None:
        return "no usage chunk"
    if first_token_at is None:
        return "no content chunk"
    if completion_tokens is None or completion_tokens <= 1:
        return "completion_tokens <= 1"
    if done_at is None:
        return "stream ended without [DONE]"
    return None

