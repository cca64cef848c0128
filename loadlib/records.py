"""One typed record per request, and the JSON-lines journal that keeps them.

Every request the tool sends ends as exactly one `RequestRecord`, successful or not: failures
are records with an `error` reason, never exceptions that escape the run. A record is made in one
place, `RequestRecord.of`, from the request's `RequestLabel` (where it belongs in the run, made by
its cell) and its `Exchange` (what the wire asked and measured); a request whose worker was lost
gets its failed record from its label alike (`RequestRecord.lost`). The journal appends
each record as one JSON line and flushes it when the request ends, so a killed run keeps every
request that had finished; `read_records` yields its records back as dicts.

Every Locust worker imports this module, so it loads no tables: the records as a DataFrame, the
journal read as one and its columnar copy (records.parquet) are `loadlib.record_table`'s.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import orjson

from loadlib import clock

RECORDS_FILE = "records.jsonl"
MANIFEST_FILE = "manifest.json"  # beside the journal: what was measured, against what (`loadlib.run.manifest`)
TARGETS_DIR = "targets"  # an A/B run's per-server files (scrapes, server info), one folder per label


def target_dir(run_dir: str | os.PathLike[str], label: str) -> Path:
    """Where an A/B run keeps the server-side files of the target labelled `label`."""
    return Path(run_dir) / TARGETS_DIR / label


# Every prompt shares the chat template's opening (`<|im_start|>user\n`, a default system
# prompt), which a radix cache matches even for a brand-new prompt; a hit is more than that.
FRAMING_TOKENS = 32


@dataclass(frozen=True, slots=True)
class RequestLabel:
    """Where a request belongs in the run, made by the run and never by the wire: a cell makes it
    (`loadlib.scenarios.Cell.label`) from the job it sends, it travels with the request to the
    process that sends it, and `RequestRecord.of` copies each field into the record's field of
    the same name. A load mode that labels its requests with more (a conversation, an agent) adds
    the field here and in `RequestRecord`, and gives it to `Cell.label`; nothing between the cell
    and the record changes (an assignment carries every field, the builder copies every field)."""

    scenario: str  # what was sent, by name: a prompt ("code") or a profile's scenario ("chat", "long-context-14k")
    cell: str
    case: str
    kind: str = ""  # the scenario's kind ("protocol", "long-context", "trace", ...); "": none (a task's own chat)
    concurrency: int = 1
    round: int = 0
    slot: int = 0  # the stream that sent it
    target: str = ""
    closed_loop: bool = False  # sent by one of `concurrency` streams, each when its last request ended
    scheduled_at: float | None = None  # when it was meant to be sent (wall clock); None: when its stream was free
    measured: bool = True
    cache_intended: str = "any"
    turn: int | None = None
    # an agent session's (`loadlib.modes.sessions`): its conversation, which replay of it (a lane
    # that plays a trace's conversation again plays a new copy), the agent that sent the request
    # ("main" or a sub-agent's id), and the prompt tokens an infinite prefix cache would hold for it
    # (its leading hash blocks already sent in its scope)
    conversation: str | None = None
    copy: int | None = None
    agent: str | None = None
    ideal_cached_tokens: int | None = None


LABEL_FIELDS = tuple(f.name for f in dataclasses.fields(RequestLabel))


@dataclass(slots=True)
class Exchange:
    """What the wire did with one request: what it asked (as sent) and what it measured of the
    answer. Times are seconds; `*_s` fields are offsets from `sent_at` (wall clock, epoch seconds,
    taken when the request bytes were handed to the kernel)."""

    max_tokens: int | None = None
    thinking: bool | None = False  # chat_template_kwargs.enable_thinking as sent; None: not sent
    sent_at: float = 0.0
    ttft_s: float | None = None  # first chunk with non-empty content/reasoning/tool call
    total_s: float | None = None  # end of stream: the `[DONE]` line, else the response end
    last_chunk_s: float | None = None  # last chunk with non-empty content/reasoning
    completion_tokens: int | None = None  # usage.completion_tokens only
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    chunks: int = 0  # chunks with non-empty content/reasoning/tool call deltas
    finish_reason: str | None = None
    http_status: int | None = None
    error: str | None = None  # failure reason; None means the request itself succeeded
    output_sha: str | None = None  # sha256 (16 hex) of the concatenated output text
    # Output chunks read in the same socket read as the first (None: no first token). A read
    # carries the kernel receive stamp of its last segment: at 1 the TTFT is the first token's
    # own arrival; above 1 the server sent them together or the client read late, and the TTFT
    # may include the gap to the last of them.
    first_read_events: int | None = None
    # With thinking: the first chunk of the answer (non-empty `content` or a tool call) after the
    # reasoning, time to first output; None when the stream had no reasoning before its answer
    # and thinking was not asked on, or no answer came (the reasoning used up max_tokens).
    ttfo_s: float | None = None
    reasoning_tokens: int | None = None  # of completion_tokens, as the server's usage counts them
    # The server's own account of this request's speculative decoding, where it sent one
    # (`loadlib.wire.sse.spec_account`; None: it sent none): its verify steps (target forward
    # passes that checked a draft), the draft tokens it proposed and those it accepted, and how
    # many verify steps accepted exactly 0, 1, 2, ... drafts ("12,3,0,5"; SGLang and vLLM send it).
    spec_verify_steps: int | None = None
    spec_draft_tokens: int | None = None
    spec_accepted_tokens: int | None = None
    spec_accept_histogram: str | None = None
    # With `--chunk-times`: the gaps between successive output chunks (those `chunks` counts), in
    # milliseconds to 0.01 ms, comma-separated (`chunk_gaps_text`; "" for fewer than two chunks);
    # None: the run did not keep them.
    chunk_gaps_ms: str | None = None
    # The answer's text and the reasoning before it, for the task that sent the request (a
    # conversation resends the reply). Kept in memory only: the journal keeps `output_sha`.
    text: str = field(default="", repr=False)
    reasoning_text: str = field(default="", repr=False)

    @classmethod
    def asking(cls, body: dict[str, Any]) -> "Exchange":
        """An exchange of `body` not yet sent: its max_tokens and thinking switch, as sent."""
        return cls(body.get("max_tokens"), (body.get("chat_template_kwargs") or {}).get("enable_thinking"))


EXCHANGE_FIELDS = tuple(f.name for f in dataclasses.fields(Exchange))


@dataclass(slots=True, kw_only=True)
class RequestRecord(Exchange):
    """What one streaming chat request did, in raw measured form (figures are derived later): its
    label, who sent it, and its exchange on the wire. `of` and `lost` make every record of a run."""

    request_id: str
    # its label (`RequestLabel`, whose fields these are)
    scenario: str
    cell: str  # "single", "c2-same", "c4-different", "closed", "open-2rps", ...
    case: str  # "single" | "same" | "different" | a free-running mode's name | "locust"
    kind: str = ""
    concurrency: int  # streams the cell runs at once (1 for single stream)
    round: int  # round index within the cell, from 0
    slot: int  # stream index within the round, from 0
    target: str = ""  # an A/B run's server, by its label in the profile's [[targets]]; "": the one server
    closed_loop: bool = False
    scheduled_at: float | None = None
    measured: bool = True  # False for warm-up, priming and calibration requests
    cache_intended: str = "any"  # "cold" (flushed, unique) | "warm" (primed, shared) | "any"
    turn: int | None = None  # turn within a multi-turn conversation (an agent session: its agent's), from 0
    conversation: str | None = None
    copy: int | None = None
    agent: str | None = None
    ideal_cached_tokens: int | None = None
    # who sent it
    worker: int  # Locust worker index (0 when running locally; -1: a lost worker's)
    user: int  # user number within that worker
    # from its label and its exchange
    queue_s: float | None = None  # client-side wait: send time minus `scheduled_at`
    cache_observed: str | None = None  # "cold" | "warm" from cached_tokens; None: not reported

    @classmethod
    def of(cls, label: RequestLabel, exchange: Exchange, request_id: str, worker: int, user: int) -> "RequestRecord":
        """The record of a request that `worker`'s `user` sent: its label's fields, its
        exchange's, and the wait before it went out where it was meant to go at a time. Its
        `sent_at` is in the coordinator's clock (`loadlib.clock`), as the label's times are."""
        sent, scheduled = clock.coordinator_time(exchange.sent_at) if exchange.sent_at else 0.0, label.scheduled_at
        return cls._made(label, exchange, request_id, worker, user,
                         max(sent - scheduled, 0.0) if scheduled is not None and sent else None, sent)

    @classmethod
    def lost(cls, label: RequestLabel, body: dict[str, Any], request_id: str, reason: str) -> "RequestRecord":
        """The failed record of a request whose own record can never come (its worker was lost):
        sent, as far as anyone knows, when it was meant to be, by nobody (worker and user -1)."""
        exchange = Exchange.asking(body)
        exchange.sent_at, exchange.error = label.scheduled_at or clock.now(), reason
        return cls._made(label, exchange, request_id, -1, -1, None, exchange.sent_at)

    @classmethod
    def _made(cls, label: RequestLabel, exchange: Exchange, request_id: str, worker: int, user: int,
              queue_s: float | None, sent_at: float) -> "RequestRecord":
        """The one place a record is made (`of`, `lost`)."""
        return cls(request_id=request_id, worker=worker, user=user, queue_s=queue_s,
                   cache_observed=observed_state(exchange.cached_tokens),
                   **{name: getattr(label, name) for name in LABEL_FIELDS},
                   **{name: getattr(exchange, name) for name in EXCHANGE_FIELDS} | {"sent_at": sent_at})

    def to_dict(self) -> dict[str, Any]:
        """The record as the journal keeps it (without the texts), its identity first."""
        return {name: getattr(self, name) for name in JOURNAL_FIELDS}

    def to_json(self) -> bytes:
        """The record as one JSON line, in an exact-size copy: orjson (3.12 and later) returns
        bytes whose buffer keeps ~16 KB behind a ~600-byte line, and a run keeps its lines."""
        return bytes(memoryview(orjson.dumps(self.to_dict())))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RequestRecord":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


IN_MEMORY_FIELDS = ("text", "reasoning_text")  # a record's fields that the journal does not keep
# The journal's fields in the order its lines have them: the record's own (its identity), then its exchange.
JOURNAL_FIELDS = tuple(name for name in (*(f.name for f in dataclasses.fields(RequestRecord)
                                            if f.name not in EXCHANGE_FIELDS), *EXCHANGE_FIELDS)
                       if name not in IN_MEMORY_FIELDS)


TICKS_PER_MS = 100  # the chunk gaps' resolution: 0.01 ms


def chunk_gaps_text(times: Sequence[float]) -> str:
    """A request's chunk stamps (wall clock, s) as its record keeps them (`chunk_gaps_ms`): the gap
    before each chunk after the first, in ms to 0.01 ms, comma-separated ("12.5,0,7.31"). Each
    chunk's offset from the first is rounded, not each gap, so however many there are the gaps sum
    to the last chunk's offset within 0.005 ms. Chunks read together share a stamp: a gap of 0."""
    if len(times) < 2:
        return ""
    ticks = np.rint((np.asarray(times) - times[0]) * (1000 * TICKS_PER_MS)).astype(np.int64)
    text = orjson.dumps(np.diff(ticks) / TICKS_PER_MS, option=orjson.OPT_SERIALIZE_NUMPY)  # each its shortest decimal
    return text[1:-1].replace(b".0,", b",").removesuffix(b".0").decode()  # whole ms without ".0"


def chunk_gaps_s(text: str) -> list[float]:
    """The gaps (s) of a record's `chunk_gaps_ms` ("" -> none), rounded to their 0.01 ms (1e-5 s)
    so that 1.18 ms reads 0.00118, not 0.0011799999999999998."""
    return [round(float(gap) / 1000, 8) for gap in text.split(",")] if text else []


def observed_state(cached_tokens: int | None) -> str | None:
    """The cache state a request met: "warm" when the prompt itself hit the prefix cache,
    "cold" when nothing beyond the template's framing did, None when the server did not say."""
    if cached_tokens is None:
        return None
    return "warm" if cached_tokens > FRAMING_TOKENS else "cold"


class RecordJournal:
    """Appends records to `records.jsonl`, one flushed line per request.

    Safe to share between greenlets and threads of one process: a line is written whole.
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.path = Path(run_dir) / RECORDS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab", buffering=0)
        self._lock = threading.Lock()
        self.count = 0

    def append(self, record: RequestRecord) -> None:
        self.append_lines(record.to_json() + b"\n")

    def append_lines(self, lines: bytes) -> None:
        """Writes records already in JSON lines (a worker's batch), newline-terminated, in one write."""
        with self._lock:
            if self._file.closed:  # a record that arrives after the run's end is still kept
                self._file = open(self.path, "ab", buffering=0)
            self._file.write(lines)
            self.count += lines.count(b"\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_records(path: str | os.PathLike[str], start: int = 0, end: int | None = None) -> Iterator[dict[str, Any]]:
    """Yields the record dicts of a journal (a run directory or the file itself), from the byte
    offset `start` (the journal's size when something began) on, up to the offset `end` (its
    size when it ended) if given.

    A torn last line (the process was killed mid-write) is skipped, not fatal.
    """
    path = Path(path)
    if path.is_dir():
        path = path / RECORDS_FILE
    with open(path, "rb") as fh:
        fh.seek(start)
        for line in fh if end is None else fh.read(max(end - start, 0)).splitlines():
            if not line.strip():
                continue
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
