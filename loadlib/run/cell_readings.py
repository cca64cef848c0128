"""Each ended cell's records, read back from the journal once, for everyone who asks at its end: the
progress line (`loadlib.run.progress`), the server watch's check (`loadlib.truth.watch`) and a
capacity search's judgement of its level (`loadlib.modes.search_driver`) share one reading and one
records table. A table costs the coordinator some 10 ms of pandas whatever the cell's size; made
by each of them, from the journal read whole for the judgement, a search's short levels cost the
master more than their requests did.

A cell's reading is its records (by name and target) among the journal's lines between two byte
offsets: where the journal stood when the cell before it ended, and where it stood when the cell
itself ended. Not from the cell's own start: a request of a capacity level may be journaled
before the master's clock reaches the level's start (a worker's clock a little ahead, the start
late on a busy loop), but none before the level before it ended, since a level is announced only
then; rounds' cells play one after another. (A timed mode's next cell starts as the last one
ends: a request of it journaled before that is in the summary, not in the progress line, and the
watch counts only the requests sent after the cell's first scrape.) By offsets, a reading is the
same whenever and wherever it is made: on the loop, or on gevent's threadpool for the line of a
free-running cell whose next cell is running. It holds what the journal had when the cell ended:
a capacity level or a rounds cell waits for its requests first; a free-running cell's requests
still in flight then are in the summary, not here.

Only the last ended cell's reading is kept (with each ended cell's offsets, for a level judged
on several cells): nothing here grows with the run's records.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from gevent.monkey import get_original

from loadlib.records import read_records

if TYPE_CHECKING:
    import pandas as pd

    from loadlib.scenarios import Cell

# A lock of the OS, not gevent's: the progress line's reading is made on a threadpool thread.
_allocate_lock = get_original("_thread", "allocate_lock")


class CellReading:
    """The records of the cells `names` of `target` in `journal` (None: none yet) between the byte
    offsets `start` and `end`, parsed and tabled once, when first asked (by whichever thread asks
    first)."""

    def __init__(self, journal: Path | None, names: Sequence[str], target: str, start: int, end: int | None) -> None:
        self.journal, self.names, self.target, self.start, self.end = journal, tuple(names), target, start, end
        self._lock = _allocate_lock()
        self._records: list[dict[str, Any]] | None = None
        self._frame: pd.DataFrame | None = None

    def records(self) -> list[dict[str, Any]]:
        """The cells' records (unmeasured ones too), in the journal's order."""
        with self._lock:
            if self._records is None:
                self._records = [] if self.journal is None else [
                    record for record in read_records(self.journal, self.start, self.end)
                    if record["cell"] in self.names and record.get("target", "") == self.target]
            return self._records

    def frame(self) -> pd.DataFrame:
        """The cells' records as one `records_frame` (measured requests only); shared: not to be
        changed in place."""
        from loadlib.record_table import records_frame  # tables (pandas): the coordinator's alone

        records = self.records()
        with self._lock:
            if self._frame is None:
                self._frame = records_frame(records)
            return self._frame


class CellReadings:
    """The `cell` hook's listener that notes where each cell's records lie in the journal (given
    by `journal`: None before a run has one) and reads them back once the cell ended. It must
    listen before anyone who asks for a reading at a cell's end."""

    def __init__(self, journal: Callable[[], Path | None]) -> None:
        self.journal = journal
        self._path: Path | None = None  # the journal of the run the offsets below are in
        self._boundary = 0  # its size when the last cell ended
        self._starts: dict[int, int] = {}  # id of a cell playing -> where its records may begin
        self._spans: dict[tuple[str, str], tuple[int, int]] = {}  # (cell, target) ended -> (start, end)
        self._last: tuple[Cell, CellReading] | None = None

    def on_cell(self, cell: Cell, phase: str, **_kwargs: Any) -> None:
        path = self.journal()
        if path is None:
            return
        if path != self._path:  # a new run (the web UI's start again)
            self._path, self._boundary, self._starts, self._spans, self._last = path, 0, {}, {}, None
        if phase == "start":
            self._starts[id(cell)] = self._boundary
            return
        end = path.stat().st_size if path.exists() else 0
        start = self._starts.pop(id(cell), 0)
        self._boundary = end
        self._spans[(cell.name, cell.target)] = (start, end)
        self._last = (cell, CellReading(path, [cell.name], cell.target, start, end))

    def of(self, cell: Cell) -> CellReading:
        """The reading of `cell` as it ended (the last cell to end), or else of its records in the
        whole journal."""
        if self._last is not None and self._last[0] is cell:
            return self._last[1]
        return self.cells([cell.name], cell.target)

    def cells(self, names: Sequence[str], target: str) -> CellReading:
        """The records of the ended cells `names` of `target` (a capacity level run again: each of
        its runs), from where the first began to where the last ended (the whole journal for a
        cell this run has not seen end)."""
        last = self._last
        if last is not None and tuple(names) == last[1].names and target == last[1].target:
            return last[1]
        path = self.journal()
        spans = [self._spans.get((name, target)) for name in names]
        if path is None or path != self._path or not spans or None in spans:
            return CellReading(path, names, target, 0, None)
        return CellReading(path, names, target, min(span[0] for span in spans), max(span[1] for span in spans))
