"""Reading a run directory: its records, its manifest, and Locust's own CSV files beside them.

Reading is strict where the input is wrong (a missing journal or an unreadable manifest raise
`RunDirError` with a one-line message naming the file) and lenient where a run was merely cut
short (a torn last line is skipped with a warning, because the journal is flushed per line).
"""

from __future__ import annotations

import json
import multiprocessing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.json as pa_json

from analysis.locust_csv import LocustCsv, read_locust_csv
from loadlib.records import (FLOAT_COLUMNS, INT_COLUMNS, RECORD_COLUMNS, TEXT_DTYPE, RecordError, frame_from_columns,
                             record_columns)
from loadlib.records import RECORDS_FILE

MANIFEST_FILE = "manifest.json"
BLOCK_BYTES = 4 << 20  # journal bytes parsed at a time
NEWLINE, COMMA, OPEN, CLOSE = b"\n,[]"
PARALLEL_BYTES = 32 << 20  # a journal this large is read in two halves at once
GROUPING_COLUMNS = ("cell", "case", "scenario")
_ARROW_READ = pa_json.ReadOptions(block_size=16 << 20)
_TEXT_MAPPER = {pa.string(): TEXT_DTYPE} if TEXT_DTYPE != object else {}
_ARROW_PARSE = pa_json.ParseOptions(unexpected_field_behavior="ignore", explicit_schema=pa.schema([
    (name, pa.int64() if name in INT_COLUMNS else pa.float64() if name in FLOAT_COLUMNS
     else pa.bool_() if name in ("thinking", "measured") else pa.string())
    for name in RECORD_COLUMNS]))


class RunDirError(Exception):
    """The input is not a readable run; the message is one line naming the input."""


class SkippedLinesWarning(UserWarning):
    """Some journal lines could not be parsed and were left out."""


@dataclass(frozen=True)
class Run:
    """One run, loaded once: every command works from this."""

    path: Path
    label: str
    records: pd.DataFrame  # `read_records_frame` of the journal
    manifest: dict[str, Any]
    locust: LocustCsv


def load_run(run_dir: str | Path, label: str | None = None) -> Run:
    """Loads a run directory; the label defaults to the directory's name."""
    path = Path(run_dir)
    return Run(path, label or path.resolve().name, read_records_frame(path), read_manifest(path),
               read_locust_csv(path))


def read_records_frame(run_dir: str | Path) -> pd.DataFrame:
    """The `records_frame` of a run directory's journal (or of a records.jsonl itself).

    Reading a million JSON lines is the slowest step of every command: pyarrow's JSON reader does
    it (`_arrow_frame`); a journal it cannot take whole (a record of the wrong shape or types) is
    read by `exact_frame`, which names the first bad line. The columns that every table groups by
    are categorical, so that each is factorised once instead of once per table."""
    path = _journal(Path(run_dir))
    fast = _arrow_frame(path)
    return fast if fast is not None else exact_frame(path)


def exact_frame(path: Path) -> pd.DataFrame:
    """The records frame of a journal parsed record by record with orjson (a large journal in two
    halves at once, the second by a forked process, `_Half`): a record of the wrong shape or types
    raises `RunDirError` naming the file and line; unreadable lines are skipped with a warning."""
    size = path.stat().st_size
    middle = _line_start_near(path, size // 2) if size >= PARALLEL_BYTES else size
    second = _Half.start(path, middle, size) if middle < size else None
    try:
        columns, tally = _read_part(path, 0, middle)
        if second is not None:
            more, more_tally = second.result()
            columns = {col: np.concatenate([values, more[col]]) for col, values in columns.items()}
            tally = tally.followed_by(more_tally)
    except _PartError as exc:
        raise RunDirError(f"{path}: line {_line_of_record(path, exc.start, exc.index)}: {exc}") from None
    finally:
        if second is not None:
            second.close()
    frame = frame_from_columns({col: pd.Categorical(values) if col in GROUPING_COLUMNS else values
                                        for col, values in columns.items()})
    if tally.bad == [tally.lines]:
        warnings.warn(f"{path}: skipped a torn last line (line {tally.lines})", SkippedLinesWarning, stacklevel=2)
    elif tally.bad:
        warnings.warn(f"{path}: skipped {len(tally.bad)} unreadable line(s), first at line {tally.bad[0]}",
                      SkippedLinesWarning, stacklevel=2)
    return frame


def _arrow_frame(path: Path) -> pd.DataFrame | None:
    """The journal read by pyarrow's multithreaded JSON reader (about twice as fast as parsing in
    Python) when every line is a record of the expected types; None otherwise, and the exact
    reader below then reads it and names the first bad line. A torn last line (a killed run) is
    left out with the same warning as there."""
    size = path.stat().st_size
    if size == 0:
        return None
    with pa.memory_map(str(path)) as mapped:
        data = mapped.read_buffer(size)
        end = size if data.slice(size - 1, 1).to_pybytes() == b"\n" else _last_newline(path, size) + 1
        if end <= 0:
            return None
        try:
            table = pa_json.read_json(pa.BufferReader(data.slice(0, end)), read_options=_ARROW_READ,
                                      parse_options=_ARROW_PARSE)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return None
    columns = _arrow_columns(table)
    if columns is None:
        return None
    frame = frame_from_columns(columns)
    if end < size:
        lines = table.num_rows + 1
        warnings.warn(f"{path}: skipped a torn last line (line {lines})", SkippedLinesWarning, stacklevel=3)
    return frame


def _arrow_columns(table: Any) -> dict[str, Any] | None:
    """`record_columns`' arrays from an Arrow table (read with the records' schema), or
    None where a value needs the exact reader (a whole number that is missing)."""
    rows = table.num_rows
    columns: dict[str, Any] = {}
    for name in RECORD_COLUMNS:
        column = table.column(name) if name in table.column_names else pa.nulls(rows)
        if name in INT_COLUMNS:
            if column.null_count:
                return None
            columns[name] = column.to_numpy()
        elif name in FLOAT_COLUMNS:
            columns[name] = column.cast(pa.float64()).to_numpy(zero_copy_only=False)
        elif name == "thinking":  # true, false, null: on, off, server (as THINKING_WORDS)
            sent = column.is_valid().to_numpy(zero_copy_only=False)
            on = column.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
            columns[name] = np.where(sent, np.where(on, "on", "off"), "server").astype(object)
        elif name == "measured":
            columns[name] = column.fill_null(True).to_numpy(zero_copy_only=False).astype(bool)
        elif name in GROUPING_COLUMNS:
            columns[name] = column.cast(pa.string()).dictionary_encode().combine_chunks().to_pandas()
        else:  # pandas' own text dtype, straight from Arrow's strings (no Python objects)
            columns[name] = column.cast(pa.string()).to_pandas(types_mapper=_TEXT_MAPPER.get)
    return columns


def _last_newline(path: Path, size: int) -> int:
    with open(path, "rb") as journal:
        journal.seek(max(size - (8 << 20), 0))
        tail = journal.read()
    found = tail.rfind(b"\n")
    return -1 if found < 0 else size - len(tail) + found


class _PartError(Exception):
    """A bad record in the part of the journal from byte `start`: the `index`-th record there."""

    def __init__(self, start: int, index: int, problem: str) -> None:
        super().__init__(start, index, problem)  # all in args: it travels back from the forked reader
        self.start, self.index, self.problem = start, index, problem

    def __str__(self) -> str:
        return self.problem


def _read_part(path: Path, start: int, stop: int) -> tuple[dict[str, np.ndarray], "_Tally"]:
    """Typed columns of the records in bytes [start, stop) of the journal (whole lines)."""
    tally = _Tally()
    try:
        return record_columns(_parsed(path, start, stop, tally)), tally
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
            columns, tally = _read_part(path, start, stop)
            sender.send(({col: pd.factorize(values) if values.dtype == object else values
                          for col, values in columns.items()}, tally))
        except _PartError as exc:
            sender.send(exc)

    def result(self) -> tuple[dict[str, np.ndarray], "_Tally"]:
        try:
            answer = self._receiver.recv()
        except EOFError:
            raise RunDirError("the process reading the second half of the journal died") from None
        if isinstance(answer, Exception):
            raise answer
        columns, tally = answer
        return {col: _unfactorised(values) if isinstance(values, tuple) else values
                for col, values in columns.items()}, tally

    def close(self) -> None:
        self._receiver.close()
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()


def _unfactorised(codes_and_values: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    codes, values = codes_and_values
    text = np.asarray(values, dtype=object).take(codes)
    text[codes < 0] = None
    return text


def _line_start_near(path: Path, offset: int) -> int:
    """The offset of the first line that starts at or after `offset`."""
    with open(path, "rb") as handle:
        handle.seek(max(offset - 1, 0))
        handle.readline()
        return handle.tell()


def _journal(path: Path) -> Path:
    if not path.exists():
        raise RunDirError(f"no such run directory: {path}")
    journal = path / RECORDS_FILE if path.is_dir() else path
    if not journal.is_file():
        raise RunDirError(f"cannot read records {journal}: No such file or directory")
    return journal


@dataclass
class _Tally:
    lines: int = 0  # lines read so far, blank ones included
    bad: list[int] = field(default_factory=list)  # 1-based numbers of the lines that did not parse

    def followed_by(self, later: "_Tally") -> "_Tally":
        """The tally of this part and the part right after it."""
        return _Tally(self.lines + later.lines, self.bad + [self.lines + n for n in later.bad])


def _parsed(path: Path, start: int, stop: int, tally: _Tally) -> Iterator[list[Any]]:
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
            yield _block_records(buffer, cut, tally)
            held = end - cut - 1
            buffer[1:1 + held] = buffer[cut + 1:end]
            if read == 0:
                return


def _block_records(buffer: bytearray, cut: int, tally: _Tally) -> list[Any]:
    """The records of `buffer[1:cut]` (whole lines), in one orjson call when every line parses."""
    bytes_ = np.frombuffer(buffer, dtype=np.uint8, count=cut + 1)
    newlines = np.flatnonzero(bytes_[1:cut] == NEWLINE) + 1
    if cut <= 1 + len(newlines):  # nothing but newlines
        tally.lines += len(newlines)
        return []
    bytes_[newlines] = COMMA
    buffer[0], saved, buffer[cut] = OPEN, buffer[cut], CLOSE
    try:
        records = orjson.loads(memoryview(buffer)[:cut + 1])
    except orjson.JSONDecodeError:
        bytes_[newlines] = NEWLINE
        records = _line_by_line(bytes(buffer[1:cut]), tally)
    else:
        tally.lines += len(records)
    buffer[cut] = saved
    del bytes_  # the buffer may grow for a long line: no view of it may outlive the block
    return records


def _line_by_line(block: bytes, tally: _Tally) -> list[Any]:
    records = []
    for line in block.split(b"\n"):
        tally.lines += 1
        if not line.strip():
            continue
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            tally.bad.append(tally.lines)
    return records


def _line_of_record(path: Path, start: int, index: int) -> int:
    """The line number (from 1) of the `index`-th record that parsed after byte `start` (a
    second, slow pass over the journal, made only to name a bad record's line)."""
    with open(path, "rb") as handle:
        number = handle.read(start).count(b"\n")
        seen = -1
        for number, line in enumerate(handle, start=number + 1):
            if not line.strip():
                continue
            try:
                orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            seen += 1
            if seen == index:
                break
    return number


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    """The run's manifest, or {} when the run has none (records written by other tools)."""
    path = Path(run_dir) / MANIFEST_FILE
    if not path.exists():
        return {}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunDirError(f"cannot read manifest {path}: {exc}") from None
    if not isinstance(manifest, dict):
        raise RunDirError(f"cannot read manifest {path}: not a JSON object")
    return manifest
