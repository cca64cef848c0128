"""One typed record per request, and the JSON-lines journal that keeps them.

Every request the tool sends ends as exactly one `RequestRecord`, successful or not: failures
are records with an `error` reason, never exceptions that escape the run. The journal appends
each record as one JSON line and flushes it when the request ends, so a killed run keeps every
request that had finished.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any, Collection, Iterable, Iterator, Mapping

import numpy as np
import orjson
import pandas as pd

from loadlib.figures.formulas import decode_tps, end_to_end_tps, prefill_tps, tok_per_chunk, uncached_prefill_tps

RECORDS_FILE = "records.jsonl"


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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

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


def read_records(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yields the record dicts of a journal (a run directory or the file itself).

    A torn last line (the process was killed mid-write) is skipped, not fatal.
    """
    path = Path(path)
    if path.is_dir():
        path = path / RECORDS_FILE
    with open(path, "rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                continue


# --- the records as a table ----------------------------------------------------------------------

# The table's columns are the record's fields, typed from their annotations: the identity fields
# (`int`, no default) as integers, every other number as float (None becomes NaN), the rest text.
_FIELDS = dataclasses.fields(RequestRecord)
RECORD_COLUMNS = [f.name for f in _FIELDS]
INT_COLUMNS = tuple(f.name for f in _FIELDS if f.type == "int" and f.default is dataclasses.MISSING)
FLOAT_COLUMNS = tuple(f.name for f in _FIELDS if f.name not in INT_COLUMNS
                      and f.type in ("int", "float", "int | None", "float | None"))
_ABSENT = dict.fromkeys(RECORD_COLUMNS)


FRAME_BATCH = 65_536  # records turned into columns at a time


# `thinking` as sent: enable_thinking true or false, or not sent at all (the server's template decides)
THINKING_MODES = ("server", "on", "off")


THINKING_WORDS: dict[Any, str] = {True: "on", False: "off", None: "server", **{w: w for w in THINKING_MODES}}


_TEXT_TYPES = frozenset((str, type(None)))


TEXT_DTYPE = pd.Series(["text"]).dtype  # pandas 3: its string dtype; pandas 2: object


def records_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Records (dicts) as a DataFrame with the per-request figures as columns.

    Requests that were not measurements (`measured` false: warm-up, priming, calibration) are
    left out here, so that no figure can count them. Adds `ok` (no error) and, for ok rows,
    `decode_tps`, `tok_per_chunk`, `e2e_tps`, `prefill_tps`, `uncached_prefill_tps`; failed rows
    hold NaN there so that they never enter a mean, and so does `decode_tps` where the answer
    came in one read (total = TTFT: no time to decode over). Also adds wall-clock instants (epoch s):
    `first_token_at`, `last_token_at` (last content chunk, else end of stream) and `end_at`.
    """
    return frame_from_batches(_batches(iter(records), FRAME_BATCH))


def frame_from_batches(batches: Iterable[list[Any]], categorical: Collection[str] = ()) -> pd.DataFrame:
    """`records_frame` for a reader that parses many records at once (e.g. one orjson call per
    block of a journal): `record_columns`, then `frame_from_columns`. Text columns named in
    `categorical` are built as categoricals (for a reader whose tables group by them)."""
    columns = record_columns(batches)
    return frame_from_columns({col: pd.Categorical(values) if col in categorical else values
                               for col, values in columns.items()})


def record_columns(batches: Iterable[list[Any]]) -> dict[str, np.ndarray]:
    """The records' `RECORD_COLUMNS` as typed arrays (float, int, bool, or object for text).

    Each batch becomes column arrays straight away, so a million records load in seconds and
    their Python objects are freed batch by batch. A record that is not an object, or a field
    whose value cannot be read as its column's type, raises `RecordError` with the record's
    position among all the records given."""
    arrays: dict[str, list[np.ndarray]] = {col: [] for col in RECORD_COLUMNS}
    offset = 0
    with _gc_paused():
        for batch in batches:
            try:
                columns = [_column(col, values) for col, values in zip(RECORD_COLUMNS, _columns(batch))]
            except (TypeError, ValueError, KeyError):
                raise _first_bad_record(batch, offset) from None
            for col, values in zip(RECORD_COLUMNS, columns):
                arrays[col].append(values)
            offset += len(batch)
    return {col: np.concatenate(parts) if parts else _column(col, ()) for col, parts in arrays.items()}


def frame_from_columns(columns: Mapping[str, Any]) -> pd.DataFrame:
    """The records frame (see `records_frame`) from `record_columns`' arrays (or categoricals)."""
    df = pd.DataFrame(dict(columns))
    if TEXT_DTYPE != object:  # pandas 3 infers its string dtype, except for text columns with no text at all
        untyped = [col for col in df.columns if df[col].dtype == object]
        df[untyped] = df[untyped].astype(TEXT_DTYPE)
    if not df["measured"].all():
        df = df[df["measured"]].reset_index(drop=True)
    ok = df["ok"] = df["error"].isna()
    comp, ttft, total = df["completion_tokens"], df["ttft_s"], df["total_s"]
    df["decode_tps"] = decode_tps(comp, ttft, total).where(ok & (total > ttft))
    df["tok_per_chunk"] = tok_per_chunk(comp, df["chunks"].replace(0, np.nan)).where(ok)
    df["e2e_tps"] = end_to_end_tps(comp, total).where(ok)
    df["prefill_tps"] = prefill_tps(df["prompt_tokens"], ttft).where(ok)
    df["uncached_prefill_tps"] = uncached_prefill_tps(df["prompt_tokens"], df["cached_tokens"], ttft).where(ok)
    df["first_token_at"] = df["sent_at"] + ttft
    df["last_token_at"] = df["sent_at"] + df["last_chunk_s"].fillna(total)
    df["end_at"] = df["sent_at"] + total
    return df


class RecordError(ValueError):
    """A record that cannot be read: `index` is its position (from 0) among the records given,
    the message says what is wrong with it in one line."""

    def __init__(self, index: int, problem: str) -> None:
        super().__init__(problem)
        self.index = index


def _batches(items: Iterator[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    while batch := list(itertools.islice(items, size)):
        yield batch


def _columns(batch: list[Any]) -> Iterator[tuple[Any, ...]]:
    """The batch's values column by column, in `RECORD_COLUMNS` order."""
    pick = itemgetter(*RECORD_COLUMNS)
    try:
        rows = list(map(pick, batch))
    except KeyError:  # older records, or another tool's, may lack fields: they are missing values
        rows = [pick({**_ABSENT, **record}) for record in batch]
    return zip(*rows)


def _column(name: str, values: tuple[Any, ...]) -> np.ndarray:
    """One column's values as a typed array; TypeError or ValueError for a value of the wrong type."""
    if name in FLOAT_COLUMNS or name in INT_COLUMNS:
        try:
            numbers = np.array(values, dtype="int64" if name in INT_COLUMNS else "float64")
        except TypeError:  # a missing value in an int column (else a value that is no number)
            numbers = np.array(values, dtype="float64")
        if numbers.ndim != 1:  # a list where a number belongs
            raise ValueError(name)
        return numbers
    if name == "thinking":  # as words: "server" (nothing sent) is neither on nor off
        try:
            return np.array(list(map(THINKING_WORDS.__getitem__, values)), dtype=object)
        except KeyError:
            raise ValueError("thinking") from None
    if name == "measured":  # records from before the field existed were all measurements
        return np.array([value is not False for value in values], dtype=bool)
    if not _TEXT_TYPES.issuperset(map(type, values)):  # a number or a list where text belongs
        raise TypeError(f"{name}: expected text")
    return np.array(values, dtype=object)  # pandas infers its string dtype


def _first_bad_record(batch: list[Any], offset: int) -> RecordError:
    """The first record of a batch that failed to convert, and what is wrong with it."""
    for index, record in enumerate(batch):
        if not isinstance(record, dict):
            return RecordError(offset + index, f"not a JSON object: {record!r:.60}")
        for name in RECORD_COLUMNS:
            value = record.get(name)
            try:
                _column(name, (value,))
            except (TypeError, ValueError):
                return RecordError(offset + index, f"{name}: {_expected(name)}, got {value!r:.40}")
    return RecordError(offset, "a record that cannot be read")


def _expected(name: str) -> str:
    if name == "thinking":
        return f"expected true, false, null or one of {', '.join(THINKING_MODES)}"
    return "expected a number" if name in FLOAT_COLUMNS or name in INT_COLUMNS else "expected text"


@contextmanager
def _gc_paused() -> Iterator[None]:
    """A million small containers trigger full collections that find nothing to free."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

