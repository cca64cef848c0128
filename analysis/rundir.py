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

from analysis.locust_csv import LocustCsv, read_locust_csv
from loadlib import metrics
from loadlib.records import RECORDS_FILE

MANIFEST_FILE = "manifest.json"
BLOCK_BYTES = 4 << 20  # journal bytes parsed at a time
NEWLINE, COMMA, OPEN, CLOSE = b"\n,[]"
PARALLEL_BYTES = 32 << 20  # a journal this large is read in two halves at once
GROUPING_COLUMNS = ("cell", "case", "scenario")


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
    """The `metrics.records_frame` of a run directory's journal (or of a records.jsonl itself).

    Turning a million JSON lines into Python objects is the slowest step of every command, so a
    large journal is read in two halves at once, the second by a forked process (`_Half`), each
    a block of lines per orjson call. The columns that every table groups by are categorical,
    so that each is factorised once instead of once per table. A record of the wrong shape or
    types raises `RunDirError` naming the file and line."""
    path = _journal(Path(run_dir))
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
    frame = metrics.frame_from_columns({col: pd.Categorical(values) if col in GROUPING_COLUMNS else values
                                        for col, values in columns.items()})
    if tally.bad == [tally.lines]:
        warnings.warn(f"{path}: skipped a torn last line (line {tally.lines})", SkippedLinesWarning, stacklevel=2)
    elif tally.bad:
        warnings.warn(f"{path}: skipped {len(tally.bad)} unreadable line(s), first at line {tally.bad[0]}",
                      SkippedLinesWarning, stacklevel=2)
    return frame


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
        return metrics.record_columns(_parsed(path, start, stop, tally)), tally
    except metrics.RecordError as exc:
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
