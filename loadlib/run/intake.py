"""Where a run's records arrive on the coordinating process (the master, or the local runner).

Records come one at a time from this process's users, or as a worker's batch of JSON lines. Either
way they go to the journal at once (a batch in one write, as it came), are counted, and the
batches that hold the last `window` of them stay in memory, as they came, for the live figures: a
worker's batch costs the master a write and a count, nothing per record. Nothing here grows with the run:
the journal on disk is the record of truth. Only a rounds run parses every record as it arrives,
because its driver waits for each request it assigned. Every record is also fired as
`loadlib.events.record` once it is on disk (parsed only when someone listens).
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any, Callable

import orjson

from loadlib.hooks import events
from loadlib.records import RecordJournal, RequestRecord
from loadlib.run.early_stop import EarlyStop


class RecordIntake:
    def __init__(self, run_dir: Path, window: int | None,
                 on_record: Callable[[dict[str, Any]], None] | None = None,
                 early_stop: EarlyStop | None = None) -> None:
        self.journal = RecordJournal(run_dir)
        self.count = 0
        self.on_record = on_record  # sees every record, parsed (the rounds driver)
        self.early_stop = early_stop  # sees the first records
        self.window = window
        self._batches: collections.deque[tuple[int, bytes]] = collections.deque()  # (records, JSON lines)
        self._kept = 0  # records in `_batches`
        self._parsed: tuple[int, list[dict[str, Any]]] = (0, [])

    def take_record(self, record: RequestRecord) -> None:
        """A record from this process's users."""
        line = record.to_json()
        self.journal.append_lines(line + b"\n")
        self._keep(line, 1)
        if self._parses:
            self._fire([orjson.loads(line)])  # read as a worker's lines are
        if self.early_stop is not None:
            self.early_stop.see_record(record)

    def take_lines(self, lines: bytes) -> None:
        """A worker's batch: JSON lines joined by newlines, kept as one piece (nothing is done
        per record here unless someone parses them)."""
        if not lines:
            return
        self.journal.append_lines(lines + b"\n")
        self._keep(lines, lines.count(b"\n") + 1)
        if self._parses:
            self._fire([orjson.loads(line) for line in lines.split(b"\n")])
        if self.early_stop is not None:
            self.early_stop.see_lines(lines)

    @property
    def _parses(self) -> bool:
        return self.on_record is not None or bool(events.record._handlers)

    def _keep(self, lines: bytes, records: int) -> None:
        """Counts the batch and keeps it for `recent`, whole batches past the window dropped."""
        self.count += records
        self._batches.append((records, lines))
        self._kept += records
        while self.window is not None and self._kept - self._batches[0][0] >= self.window:
            self._kept -= self._batches.popleft()[0]

    def _fire(self, parsed: list[dict[str, Any]]) -> None:
        for record in parsed:
            if self.on_record is not None:
                self.on_record(record)
            events.record.fire(record=record)

    def recent(self) -> list[dict[str, Any]]:
        """The last `window` records, parsed when asked for (and again only after new ones came)."""
        count, parsed = self._parsed
        if count != self.count:
            lines = b"\n".join(lines for _records, lines in self._batches).split(b"\n")
            parsed = [orjson.loads(line) for line in (lines[-self.window:] if self.window else lines)]
            self._parsed = (self.count, parsed)
        return parsed

    def close(self) -> None:
        self.journal.close()
