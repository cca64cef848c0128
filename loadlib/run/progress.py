"""Where a run is: one log line when each cell starts and one when it ends, with its figures.

    cell c4-same starts: 3 rounds of 4 streams
    cell c4-same done: 12 requests, 0 failed; aggregate 859.7 t/s

The end line's figures are the summary's (`loadlib.figures.headline.cell_headline`), computed
once, on the coordinating process, from the cell's records as its end read them back from the
journal (`loadlib.run.cell_readings`, the reading the server watch and a search's judgement
share), so no request pays for them. When nothing is in flight (a rounds cell, a search level,
the last cell: their drivers wait for every request) the line is made at once, before the next
cell starts, which costs the run tens of ms between cells and its measurements nothing. A
free-running cell ends on the clock while the next one runs: its line is made on gevent's
threadpool, queued behind any line before it so that they keep their order, and the requests in
flight only share the interpreter with it (the loop stalled at most 0.1 s at the end of a cell
of 20,000 requests, not the 0.3 s the line took). Its requests still in flight when it ended are
in the summary, not in the line.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

import gevent
from gevent.queue import JoinableQueue

from loadlib.figures.headline import cell_headline
from loadlib.record_table import records_frame
from loadlib.report.text import num
from loadlib.scenarios import Cell
from loadlib.scenarios.base import SINGLE, WARMUP

if TYPE_CHECKING:
    import pandas as pd

    from loadlib.run.cell_readings import CellReading, CellReadings

log = logging.getLogger("uni-bench")

DIGITS = {"decode t/s": 1, "aggregate t/s": 1, "req/s": 2, "TTFT p50 s": 3}
FLUSH_S = 10.0  # how long the test's end waits for the last lines


class CellProgress:
    """The `cell` hook's listener that logs each cell's start and end, the end from the cell's
    reading in `readings` (which listens before it); `in_flight` gives the requests in flight now."""

    def __init__(self, readings: CellReadings, in_flight: Callable[[], int]) -> None:
        self.readings, self.in_flight = readings, in_flight
        self._playing: set[int] = set()  # ids of the cells started and not yet ended
        self._queued: JoinableQueue = JoinableQueue()  # lines made on the threadpool, in the cells' order
        gevent.spawn(self._log_queued)

    def on_cell(self, cell: Cell, phase: str, **_kwargs: Any) -> None:
        if self.readings.journal() is None or not log.isEnabledFor(logging.INFO):
            return  # no run, or a line nobody would see (`--loglevel WARNING`): its figures are not made
        if phase == "start":
            self._playing.add(id(cell))
            line = partial(started, cell)
        elif id(cell) in self._playing:
            self._playing.discard(id(cell))
            line = partial(ended, cell, self.readings.of(cell))
        else:
            return
        if self._queued.unfinished_tasks or (phase == "end" and self.in_flight()):
            self._queued.put(line)
        else:
            _log(line)

    def flush(self, **_kwargs: Any) -> None:
        """Waits (bounded) until every cell's line is out: the test is ending."""
        self._queued.join(timeout=FLUSH_S)

    def _log_queued(self) -> None:
        threads = gevent.get_hub().threadpool
        for line in self._queued:
            _log(partial(threads.apply, line))
            self._queued.task_done()


def _log(line: Callable[[], str]) -> None:
    try:
        log.info("%s", line())
    except Exception as exc:  # noqa: BLE001 (a line that cannot be made must not end the run)
        log.warning("progress: no line for a cell: %r", exc)


def started(cell: Cell) -> str:
    return f"cell {label(cell)} starts: {planned(cell)}"


def ended(cell: Cell, reading: CellReading) -> str:
    return f"cell {label(cell)} done: {outcome(reading.records(), reading.frame())}"


def label(cell: Cell) -> str:
    """The cell's name; the protocol's single-stream cells' (all named "single") with their
    prompt, an A/B run's with its server."""
    name = f"{cell.name} ({cell.prompts[0]})" if cell.name == SINGLE else cell.name
    return f"{name} on {cell.target}" if cell.target else name


def planned(cell: Cell) -> str:
    """A rounds cell's rounds and streams, a free-running cell's users and time."""
    if cell.rounds:
        return f"{count(cell.rounds, 'round')} of {count(cell.concurrency, 'stream')}"
    timed = f" for {cell.duration_s:g} s" if cell.duration_s else ""
    unmeasured = " (not measured)" if cell.name == WARMUP else ""
    return f"{count(cell.concurrency, 'user')}{timed}{unmeasured}"


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def outcome(records: list[dict[str, Any]], frame: pd.DataFrame | None = None) -> str:
    """Its requests, failures and headline figures (a warm-up's requests only: not measured);
    `frame`: the records' `records_frame`, if made already."""
    failed = sum(record["error"] is not None for record in records)
    said = f"{count(len(records), 'request')}, {failed} failed"
    table = records_frame(records) if frame is None else frame
    figures = ", ".join(shown(name, value) for name, value in cell_headline(table))
    return f"{said}; {figures}" if figures else said


def shown(figure: str, value: float) -> str:
    """"decode t/s", 246.53 -> "decode 246.5 t/s": the value before the unit (the name's last word)."""
    *name, unit = figure.split()
    return " ".join([*name, num(value, DIGITS[figure]), unit])
