"""The records as a table: a pandas DataFrame with a column per record field and the
per-request figures, built from record dicts (`records_frame`, the live run's coordinator) or
read from a run's journal (`read_journal`: pyarrow's JSON reader, or the exact
record-by-record reader that names a bad record's file and line).

A run that ends also leaves the journal's columnar copy, `records.parquet`: the same records as a
table, which reads in a fraction of the time and opens in pandas, DuckDB or Polars as it is. The
journal stays the truth: the copy is read only while it matches the journal (`_journal_stamp`).

Apart from `loadlib.records` (the record and its journal) so that a Locust worker, which only
writes records, loads neither pandas nor pyarrow.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import itertools
import multiprocessing
import os
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pa_parquet

from loadlib.figures.formulas import decode_tps, end_to_end_tps, prefill_tps, tok_per_chunk, uncached_prefill_tps
from loadlib.modes.older_records import fill_label_fields
from loadlib.records import JOURNAL_FIELDS, RECORDS_FILE, RequestRecord

# --- the records as a table ----------------------------------------------------------------------

# The table's columns are the journal's fields, typed from their annotations: the identity fields
# (`int`, no default) as integers, every other number as float (None becomes NaN), flags as
# booleans, the rest text.
_FIELDS = sorted((f for f in dataclasses.fields(RequestRecord) if f.name in JOURNAL_FIELDS),
                 key=lambda f: JOURNAL_FIELDS.index(f.name))
RECORD_COLUMNS = [f.name for f in _FIELDS]
INT_COLUMNS = tuple(f.name for f in _FIELDS if f.type == "int" and f.default is dataclasses.MISSING)
FLOAT_COLUMNS = tuple(f.name for f in _FIELDS if f.name not in INT_COLUMNS
                      and f.type in ("int", "float", "int | None", "float | None"))
_FLAGS = frozenset((bool, type(None)))
_ABSENT = dict.fromkeys(RECORD_COLUMNS)
# What a record measured and when: a JSON object without one of these is not a request record
# (other fields may be missing in older records or another tool's, and are then missing values).
REQUIRED_COLUMNS = ("request_id", "scenario", "cell", "concurrency", "case", "round", "sent_at")
_REQUIRED_AT = {col: RECORD_COLUMNS.index(col) for col in REQUIRED_COLUMNS}


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
    return frame_from_columns(record_columns(_batches(iter(records), FRAME_BATCH)))


def record_columns(batches: Iterable[list[Any]]) -> dict[str, np.ndarray]:
    """The records' `RECORD_COLUMNS` as typed arrays (float, int, bool, or object for text).

    Each batch becomes column arrays straight away, so a million records load in seconds and
    their Python objects are freed batch by batch. A record that is not an object, lacks one of
    the `REQUIRED_COLUMNS`, or has a field whose value cannot be read as its column's type, raises
    `RecordError` with the record's position among all the records given."""
    arrays: dict[str, list[np.ndarray]] = {col: [] for col in RECORD_COLUMNS}
    offset = 0
    with _gc_paused():
        for batch in batches:
            if not batch:
                continue
            try:
                columns = [_column(col, values) for col, values in zip(RECORD_COLUMNS, _columns(batch))]
            except (TypeError, ValueError, KeyError):
                raise _first_bad_record(batch, offset) from None
            if any(pd.isna(columns[_REQUIRED_AT[col]]).any() for col in REQUIRED_COLUMNS):
                raise _first_bad_record(batch, offset)
            for col, values in zip(RECORD_COLUMNS, columns):
                arrays[col].append(values)
            offset += len(batch)
    return {col: np.concatenate(parts) if parts else _column(col, ()) for col, parts in arrays.items()}


def frame_from_columns(columns: Mapping[str, Any] | pd.DataFrame) -> pd.DataFrame:
    """The records frame (see `records_frame`) from `record_columns`' arrays (or categoricals),
    or from a DataFrame of them, which it then extends in place."""
    df = columns if isinstance(columns, pd.DataFrame) else pd.DataFrame(dict(columns))
    fill_label_fields(df)  # records from before a label field: what they said of it then
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
    if name == "closed_loop":  # None: a record from before the field (`fill_label_fields`)
        if not _FLAGS.issuperset(map(type, values)):
            raise TypeError(name)
        return np.array(values, dtype=object)
    if not _TEXT_TYPES.issuperset(map(type, values)):  # a number or a list where text belongs
        raise TypeError(f"{name}: expected text")
    return np.array(values, dtype=object)  # pandas infers its string dtype


def _first_bad_record(batch: list[Any], offset: int) -> RecordError:
    """The first record of a batch that failed to convert, and what is wrong with it."""
    for index, record in enumerate(batch):
        if isinstance(record, _Unparsed):
            return RecordError(offset + index, f"not valid JSON (a torn or garbled line): {record.text!r:.60}")
        if not isinstance(record, dict):
            return RecordError(offset + index, f"not a JSON object: {record!r:.60}")
        for name in RECORD_COLUMNS:
            value = record.get(name)
            try:
                _column(name, (value,))
            except (TypeError, ValueError):
                return RecordError(offset + index, f"{name}: {_expected(name)}, got {value!r:.40}")
        for name in REQUIRED_COLUMNS:
            if record.get(name) is None:
                return RecordError(offset + index, f"not a request record: no {name}")
    return RecordError(offset, "a record that cannot be read")


def _expected(name: str) -> str:
    if name == "thinking":
        return f"expected true, false, null or one of {', '.join(THINKING_MODES)}"
    if name == "closed_loop":
        return "expected true, false or null"
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


# --- a journal read as the table -------------------------------------------------------------------

BLOCK_BYTES = 4 << 20  # journal bytes parsed at a time
NEWLINE, COMMA, OPEN, CLOSE = b"\n,[]"
PARALLEL_BYTES = 32 << 20  # a journal this large is read in two halves at once
GROUPING_COLUMNS = ("cell", "case", "scenario", "kind")
_ARROW_READ = pa_json.ReadOptions(block_size=16 << 20)
try:  # jemalloc, where the wheel has it: mimalloc spent ~1 s of system time on a million records
    _ARROW_POOL = pa.jemalloc_memory_pool()
except NotImplementedError:
    _ARROW_POOL = pa.default_memory_pool()
_TEXT_MAPPER = {pa.string(): TEXT_DTYPE} if TEXT_DTYPE != object else {}
_ARROW_PARSE = pa_json.ParseOptions(unexpected_field_behavior="ignore", explicit_schema=pa.schema([
    (name, pa.int64() if name in INT_COLUMNS else pa.float64() if name in FLOAT_COLUMNS
     else pa.bool_() if name in ("thinking", "measured", "closed_loop") else pa.string())
    for name in RECORD_COLUMNS]))



class JournalError(Exception):
    """The journal cannot be read as records; the message is one line naming the file (and line)."""


class SkippedLinesWarning(UserWarning):
    """The journal's last line was torn (the run was killed mid-write) and is left out."""


def read_records_frame(path: str | os.PathLike[str], *, keep_copy: bool = False) -> pd.DataFrame:
    """The `records_frame` of a run directory's journal (or of a records.jsonl itself): its
    measured records (`read_journal`'s first frame)."""
    return read_journal(path, keep_copy=keep_copy)[0]


def read_journal(path: str | os.PathLike[str], *,
                 keep_copy: bool = False) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """A run directory's journal (or a records.jsonl itself) in one pass: the `records_frame` of
    its measured records and, beside it, its unmeasured ones (warm-up, priming, calibration: the
    server counted them too) as a records frame of their own, marked measured so that it keeps
    them; None without any.

    Reading a million JSON lines is the slowest step of every command: the journal's columnar copy
    is read instead where it matches the journal (`_fresh_copy`); else pyarrow's JSON reader reads
    the journal (`_arrow_table`), and `keep_copy` then writes the copy for the next reader (the run
    does, at its end). A journal pyarrow cannot take whole (a record of the wrong shape or types)
    is read by `exact_frame`, which names the first bad line. The columns that every table groups
    by are categorical, so that each is factorised once instead of once per table.

    Only the last line may be unreadable (torn: the run was killed while writing it); it is left
    out with a `SkippedLinesWarning`. Any other line that is not a record raises `JournalError`."""
    path = Path(path)
    alone = _copy_alone(path)
    if alone is not None:
        return _table_frames(_read_copy_alone(alone))
    path = _journal(path)
    stop = _records_end(path)
    if stop == 0:
        return _exact_frames(path)
    stamp = _journal_stamp(path, stop)
    table = _fresh_copy(path, stamp)
    if table is None:
        table = _arrow_table(path, stop)
        if table is None:
            return _exact_frames(path)
        if keep_copy:
            _write_copy(path, stamp, table)
    frames = _table_frames(table)
    _warn_if_torn(path, stop)
    return frames


def split_records(records: Iterable[dict[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Record dicts as `read_journal` gives a journal: the `records_frame` of the measured ones,
    and the unmeasured ones as a frame of their own (None without any)."""
    records = list(records)
    unmeasured = [{**record, "measured": True} for record in records
                  if isinstance(record, dict) and record.get("measured") is False]
    return records_frame(records), records_frame(unmeasured) if unmeasured else None


def _table_frames(table: Any) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The measured and the unmeasured records' frames (`read_journal`) of the records' Arrow table."""
    measured = table.column("measured")
    if pc.all(measured).as_py():
        return _table_frame(table), None
    unmeasured = table.filter(pc.invert(measured))
    unmeasured = unmeasured.set_column(table.schema.get_field_index("measured"), "measured",
                                       pa.array([True] * unmeasured.num_rows))
    return _table_frame(table.filter(measured)), _table_frame(unmeasured)


def _table_frame(table: Any) -> pd.DataFrame:
    """The records frame of the records' Arrow table."""
    # One conversion of the whole table, a block per column: stacking the numbers into 2-D
    # blocks would copy them all once more, and fresh memory is dear on this kind of machine.
    return frame_from_columns(table.to_pandas(split_blocks=True, self_destruct=True,
                                              types_mapper=_TEXT_MAPPER.get, memory_pool=_ARROW_POOL))


def exact_frame(path: Path) -> pd.DataFrame:
    """The records frame of a journal parsed record by record with orjson (a large journal in two
    halves at once, the second by a forked process, `_Half`): a line that is not JSON, or a record
    of the wrong shape or types, raises `JournalError` naming the file and line."""
    return _exact_frames(path)[0]


def _exact_frames(path: Path) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """`exact_frame`'s records, the measured and the unmeasured ones apart (`read_journal`)."""
    stop = _records_end(path)
    middle = _line_start_near(path, stop // 2) if stop >= PARALLEL_BYTES else stop
    second = _Half.start(path, middle, stop) if middle < stop else None
    try:
        columns = _read_part(path, 0, middle)
        if second is not None:
            more = second.result()
            columns = {col: np.concatenate([values, more[col]]) for col, values in columns.items()}
    except _PartError as exc:
        raise JournalError(f"{path}: line {_line_of_record(path, exc.start, exc.index)}: {exc}") from None
    finally:
        if second is not None:
            second.close()
    measured = columns["measured"]
    unmeasured = None
    if not measured.all():
        unmeasured = {col: values[~measured] for col, values in columns.items()}
        unmeasured["measured"] = np.ones(len(unmeasured["measured"]), dtype=bool)
    frames = tuple(frame_from_columns({col: pd.Categorical(values) if col in GROUPING_COLUMNS else values
                                       for col, values in part.items()}) if part is not None else None
                   for part in (columns, unmeasured))
    _warn_if_torn(path, stop)
    return frames


def _arrow_table(path: Path, stop: int) -> Any | None:
    """The journal's records up to byte `stop` as the records' Arrow table, read by pyarrow's
    multithreaded JSON reader (about twice as fast as parsing in Python), when every line is a
    record of the expected types; None otherwise, and the exact reader then names the first bad line."""
    with pa.memory_map(str(path)) as mapped:
        try:
            table = pa_json.read_json(pa.BufferReader(mapped.read_buffer(stop)), read_options=_ARROW_READ,
                                      parse_options=_ARROW_PARSE, memory_pool=_ARROW_POOL)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return None
    return _record_table(table)


def _record_table(table: Any) -> Any | None:
    """The Arrow table (read with the records' schema) with `record_columns`' column types, or
    None where a value needs the exact reader (a whole number that is missing, a record without
    one of the `REQUIRED_COLUMNS`: that reader names its line)."""
    columns = []
    for name in RECORD_COLUMNS:
        column = table.column(name)  # every field of the schema, null where no line has it
        if column.null_count and (name in INT_COLUMNS or name in REQUIRED_COLUMNS):
            return None
        if name == "thinking":  # true, false, null: on, off, server (as THINKING_WORDS)
            column = pc.if_else(column.is_valid(), pc.if_else(column.fill_null(False), "on", "off"), "server")
        elif name == "measured":
            column = column.fill_null(True)
        elif name in GROUPING_COLUMNS:
            column = column.dictionary_encode()
        columns.append(column)
    return pa.table(columns, names=RECORD_COLUMNS)


# --- the journal's columnar copy ---------------------------------------------------------------

COPY_SUFFIX = ".parquet"  # records.jsonl -> records.parquet, beside it
JOURNAL_SUFFIX = ".jsonl"
COPY_STAMP = b"uni_locust.journal"  # the copy's metadata key: which journal it copies (`_journal_stamp`)
COPY_ROWS = 65_536  # rows per row group: a reader that wants few rows skips the groups without any
STAMP_BYTES = 64 << 10  # the journal's head and tail hashed into its stamp


def copy_path(journal: Path) -> Path:
    """Where the columnar copy of `journal` is kept."""
    return journal.with_suffix(COPY_SUFFIX)


def _journal_stamp(path: Path, stop: int) -> bytes:
    """What the copy must carry to stand for the journal: the table's layout, the journal's size,
    where its records end, and a digest of its first and last 64 KB. A journal appended to, cut, or
    edited in its first or last 64 KB does not match; a run directory copied to another machine still does."""
    size = path.stat().st_size
    digest = hashlib.blake2b(",".join(RECORD_COLUMNS).encode(), digest_size=16)
    with open(path, "rb") as journal:
        digest.update(journal.read(STAMP_BYTES))
        journal.seek(max(size - STAMP_BYTES, 0))
        digest.update(journal.read())
    return f"{size}:{stop}:{digest.hexdigest()}".encode()


def _fresh_copy(path: Path, stamp: bytes, filters: list[tuple[str, str, Any]] | None = None) -> Any | None:
    """The copy's table (its rows that pass `filters`) when it stands for the journal as it is now;
    None when there is none, it is stale or it cannot be read (the journal is then read, as if
    there were no copy)."""
    copy = copy_path(path)
    if not copy.is_file():
        return None
    try:
        if (pa_parquet.read_schema(copy).metadata or {}).get(COPY_STAMP) != stamp:
            return None
        return pa_parquet.read_table(copy, filters=filters, memory_map=True)
    except (OSError, pa.ArrowException):
        return None


def _copy_alone(path: Path) -> Path | None:
    """The columnar copy to read as the run's records when its journal is not there (a run shared
    without it: a million records are ~40 MB of copy against ~600 MB of journal), given as the run
    directory or the copy itself; None where there is a journal to read."""
    given = path / RECORDS_FILE if path.is_dir() else path
    copy = copy_path(given)
    return copy if copy.is_file() and not copy.with_suffix(JOURNAL_SUFFIX).exists() else None


def _read_copy_alone(copy: Path, filters: list[tuple[str, str, Any]] | None = None) -> Any:
    """The records of a copy read without its journal; `JournalError` naming the file when it is
    not one this version wrote or cannot be read."""
    try:
        table = pa_parquet.read_table(copy, filters=filters, memory_map=True)
    except (OSError, pa.ArrowException) as exc:
        raise JournalError(f"cannot read records {copy}: {str(exc).splitlines()[0]}") from None
    missing = [name for name in RECORD_COLUMNS if name not in table.column_names]
    if table.column_names != [name for name in RECORD_COLUMNS if name not in missing] \
            or any(name in REQUIRED_COLUMNS for name in missing):
        raise JournalError(f"{copy}: not a records copy this version reads (its columns differ); "
                           f"read its run's {RECORDS_FILE} instead")
    for name in missing:  # a field added since the copy was written: null, as in the journal's older lines
        table = table.add_column(RECORD_COLUMNS.index(name), name,
                                 pa.nulls(table.num_rows, _ARROW_PARSE.explicit_schema.field(name).type))
    return table


def _write_copy(path: Path, stamp: bytes, table: Any) -> None:
    """Writes the copy whole or not at all (a reader never sees half of one); a copy that cannot
    be written costs only speed, and says so."""
    copy = copy_path(path)
    partial = copy.with_name(f".{copy.name}.partial")
    try:
        pa_parquet.write_table(table.replace_schema_metadata({COPY_STAMP: stamp}), partial, compression="zstd",
                               row_group_size=COPY_ROWS)
        os.replace(partial, copy)
    except (OSError, pa.ArrowException) as exc:
        partial.unlink(missing_ok=True)
        warnings.warn(f"{copy}: not written ({exc}); reports read {path.name} instead", stacklevel=3)


TAIL_BYTES = 64 << 10  # read from the journal's end to find its last line (a record is ~600 bytes)


def _records_end(path: Path) -> int:
    """Where the journal's records end: the start of its last line when that line is torn (not
    valid JSON: the process was killed while writing it), else the end of the file. Blank lines
    after it do not count."""
    size = path.stat().st_size
    with open(path, "rb") as journal:
        chunk = TAIL_BYTES
        while True:
            start = max(size - chunk, 0)
            journal.seek(start)
            tail = journal.read().rstrip()
            line_start = tail.rfind(b"\n") + 1
            if line_start > 0 or start == 0:
                break
            chunk *= 2  # one line longer than the tail read so far
    if not tail:
        return size
    try:
        orjson.loads(tail[line_start:])
    except orjson.JSONDecodeError:
        return start + line_start
    return size


def _warn_if_torn(path: Path, stop: int) -> None:
    if stop < path.stat().st_size:
        warnings.warn(f"{path}: skipped a torn last line (line {_lines_before(path, stop) + 1})",
                      SkippedLinesWarning, stacklevel=4)


def _lines_before(path: Path, offset: int) -> int:
    """How many lines end before byte `offset` of the journal."""
    count = 0
    with open(path, "rb") as handle:
        while offset > 0 and (block := handle.read(min(offset, BLOCK_BYTES))):
            count += block.count(b"\n")
            offset -= len(block)
    return count


class _PartError(Exception):
    """A bad record in the part of the journal from byte `start`: the `index`-th record there."""

    def __init__(self, start: int, index: int, problem: str) -> None:
        super().__init__(start, index, problem)  # all in args: it travels back from the forked reader
        self.start, self.index, self.problem = start, index, problem

    def __str__(self) -> str:
        return self.problem


def _read_part(path: Path, start: int, stop: int) -> dict[str, np.ndarray]:
    """Typed columns of the records in bytes [start, stop) of the journal (whole lines)."""
    try:
        return record_columns(_parsed(path, start, stop))
    except RecordError as exc:
        raise _PartError(start, exc.index, str(exc)) from None


class _Half:
    """The second half of a journal, read by a forked process while this one reads the first.

    Text columns travel factorised (codes and distinct values): pickling a million separate
    string objects would cost as much as reading them."""

    def __init__(self, process: Any, receiver: Any) -> None:
        self._process, self._receiver = process, receiver

    @classmethod
    def start(cls, path: Path, start: int, stop: int) -> "_Half":
        context = multiprocessing.get_context("fork")
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(target=cls._work, args=(sender, path, start, stop), daemon=True)
        process.start()
        sender.close()
        return cls(process, receiver)

    @staticmethod
    def _work(sender: Any, path: Path, start: int, stop: int) -> None:
        try:
            columns = _read_part(path, start, stop)
            sender.send({col: pd.factorize(values) if values.dtype == object else values
                         for col, values in columns.items()})
        except _PartError as exc:
            sender.send(exc)

    def result(self) -> dict[str, np.ndarray]:
        try:
            answer = self._receiver.recv()
        except EOFError:
            raise JournalError("the process reading the second half of the journal died") from None
        if isinstance(answer, Exception):
            raise answer
        return {col: _unfactorised(values) if isinstance(values, tuple) else values
                for col, values in answer.items()}

    def close(self) -> None:
        self._receiver.close()
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()


def _unfactorised(codes_and_values: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    codes, values = codes_and_values
    text = np.full(len(codes), None, dtype=object)  # a column may hold no text at all (no errors)
    found = codes >= 0
    text[found] = np.asarray(values, dtype=object).take(codes[found])
    return text


def _line_start_near(path: Path, offset: int) -> int:
    """The offset of the first line that starts at or after `offset`."""
    with open(path, "rb") as handle:
        handle.seek(max(offset - 1, 0))
        handle.readline()
        return handle.tell()


def _journal(path: Path) -> Path:
    """The journal of a run directory, or the journal given, or the one beside the copy given."""
    if not path.exists():
        raise JournalError(f"no such run directory: {path}")
    journal = path / RECORDS_FILE if path.is_dir() else path.with_suffix(JOURNAL_SUFFIX) \
        if path.suffix == COPY_SUFFIX else path
    if not journal.is_file():
        raise JournalError(f"cannot read records {journal}: No such file or directory")
    return journal


@dataclass(frozen=True, slots=True)
class _Unparsed:
    """A line that is not valid JSON, in its place among the records: converting it raises
    `RecordError` there, so that the first bad line of the journal is the one named."""

    text: str


def _parsed(path: Path, start: int, stop: int) -> Iterator[list[Any]]:
    """The records in bytes [start, stop) of the journal, a block at a time: each block's
    newlines made commas of one JSON array and parsed with one orjson call, line by line only
    when it holds a bad or blank line.

    The block is read into one buffer that lives for the whole part: on this kind of machine,
    fresh memory for every block (page faults) cost more than parsing it."""
    buffer = bytearray(BLOCK_BYTES + 2)  # "[" + whole lines + "]"
    held = 0  # bytes of an unfinished line, kept at the start of the buffer (after the "[")
    left = stop - start
    with open(path, "rb") as handle:
        handle.seek(start)
        while True:
            if held == len(buffer) - 2:  # a line longer than the buffer: make room
                buffer.extend(bytes(len(buffer)))
            room = min(len(buffer) - 2 - held, left)
            read = handle.readinto(memoryview(buffer)[1 + held:1 + held + room])
            left -= read
            end = 1 + held + read
            cut = end if read == 0 else buffer.rfind(b"\n", 1, end)
            if cut < 0:
                held += read
                continue
            yield _block_records(buffer, cut)
            held = end - cut - 1
            buffer[1:1 + held] = buffer[cut + 1:end]
            if read == 0:
                return


def _block_records(buffer: bytearray, cut: int) -> list[Any]:
    """The records of `buffer[1:cut]` (whole lines), in one orjson call when every line parses."""
    bytes_ = np.frombuffer(buffer, dtype=np.uint8, count=cut + 1)
    newlines = np.flatnonzero(bytes_[1:cut] == NEWLINE) + 1
    if cut <= 1 + len(newlines):  # nothing but newlines
        return []
    bytes_[newlines] = COMMA
    buffer[0], saved, buffer[cut] = OPEN, buffer[cut], CLOSE
    try:
        records = orjson.loads(memoryview(buffer)[:cut + 1])
    except orjson.JSONDecodeError:
        bytes_[newlines] = NEWLINE
        records = _line_by_line(bytes(buffer[1:cut]))
    buffer[cut] = saved
    del bytes_  # the buffer may grow for a long line: no view of it may outlive the block
    return records


def _line_by_line(block: bytes) -> list[Any]:
    """The block's records up to its first line that is not JSON, which ends the list as `_Unparsed`."""
    records = []
    for line in block.split(b"\n"):
        if not line.strip():
            continue
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            records.append(_Unparsed(line.decode("utf-8", "replace")))
            break
    return records


def _line_of_record(path: Path, start: int, index: int) -> int:
    """The line number (from 1) of the `index`-th record (non-blank line) after byte `start`."""
    number = _lines_before(path, start)
    with open(path, "rb") as handle:
        handle.seek(start)
        seen = -1
        for number, line in enumerate(handle, start=number + 1):
            if line.strip():
                seen += 1
                if seen == index:
                    break
    return number
