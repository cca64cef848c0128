"""One typed record per request, and the JSON-lines journal that keeps them.

Every request the tool sends ends as exactly one `RequestRecord`, successful or not: failures
are records with an `error` reason, never exceptions that escape the run. The journal appends
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
from typing import Any, Iterator

import orjson

RECORDS_FILE = "records.jsonl"
TARGETS_DIR = "targets"  # an A/B run's per-server files (scrapes, server info), one folder per label


def target_dir(run_dir: str | os.PathLike[str], label: str) -> Path:
    """Where an A/B run keeps the server-side files of the target labelled `label`."""
    return Path(run_dir) / TARGETS_DIR / label
IN_MEMORY_FIELDS = ("text", "reasoning_text")  # a record's fields that the journal does not keep


@dataclass(slots=True)
class RequestRecord:
    """What one streaming chat request did, in raw measured form (figures are derived later).

    Times are seconds; `*_s` fields are offsets from `sent_at` (wall clock, epoch seconds,
    taken when the request bytes were handed to the kernel).
    """

    request_id: str
    scenario: str  # prompt/scenario name, e.g. "code", "cn_essay", "code_b"
    cell: str  # measurement cell, e.g. "single", "c2-same", "c4-different"
    concurrency: int  # streams started together in this round (1 for single stream)
    case: str  # "single" | "same" | "different" (or a free-running mode's name)
    round: int  # round index within the cell, from 0
    slot: int  # stream index within the round, from 0
    worker: int  # Locust worker index (0 when running locally)
    user: int  # user number within that worker
    sent_at: float
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
    max_tokens: int | None = None
    thinking: bool | None = False  # chat_template_kwargs.enable_thinking as sent; None: not sent
    cache_intended: str = "any"  # "cold" (flushed, unique) | "warm" (primed, shared) | "any"
    cache_observed: str | None = None  # "cold" | "warm" from cached_tokens; None: not reported
    queue_s: float | None = None  # client-side wait: send time minus the scheduled start
    turn: int | None = None  # turn within a multi-turn conversation, from 0
    measured: bool = True  # False for warm-up, priming and calibration requests
    target: str = ""  # an A/B run's server, by its label in the profile's [[targets]]; "": the one server
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
    # The answer's text and the reasoning before it, for the task that sent the request (a
    # conversation resends the reply). Kept in memory only: the journal keeps `output_sha`.
    text: str = field(default="", repr=False)
    reasoning_text: str = field(default="", repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The record as the journal keeps it (without the texts)."""
        out = dataclasses.asdict(self)
        del out["text"], out["reasoning_text"]
        return out

    def to_json(self) -> bytes:
        """The record as one JSON line, in an exact-size copy: orjson (3.12 and later) returns
        bytes whose buffer keeps ~16 KB behind a ~600-byte line, and a run keeps its lines."""
        return bytes(memoryview(orjson.dumps(self.to_dict())))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RequestRecord":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


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


def read_records(path: str | os.PathLike[str], start: int = 0) -> Iterator[dict[str, Any]]:
    """Yields the record dicts of a journal (a run directory or the file itself), from the byte
    offset `start` (the journal's size when something began) on.

    A torn last line (the process was killed mid-write) is skipped, not fatal.
    """
    path = Path(path)
    if path.is_dir():
        path = path / RECORDS_FILE
    with open(path, "rb") as fh:
        fh.seek(start)
        for line in fh:
            if not line.strip():
                continue
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
