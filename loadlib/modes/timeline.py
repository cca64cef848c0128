"""What the free-running load modes (closed, ladder, open, trace; the search in its own way) share.

They run where the users are (the local process, or each Locust worker); the coordinating process
only keeps time. A run's cells follow each other on the wall clock from the run's start, which the
coordinator announces once per run, so every process reads the same `Timeline` and knows which cell
a request belongs to without asking anyone. A warm-up (`warmup_s`) first runs the same load as an
unmeasured "warmup" cell.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import gevent

from loadlib.modes.driver import Driver, DriverInputs, LoadMode, drain
from loadlib.scenarios import Cell, Mix, Scenario, build_scenarios
from loadlib.scenarios.base import WARMUP

ERROR_PAUSE_S = 0.5  # a closed-loop stream pauses after a failure instead of spinning on it
SHAPE_LOOKAHEAD_S = 1.5  # Locust's shape ticks once a second: spawn a level's users before it starts


def with_warmup(measured: list[Cell], mode: str, warmup_s: float) -> list[Cell]:
    """The measured cells, after an unmeasured warm-up of the first one's load when `warmup_s` > 0."""
    first = measured[0]
    warmup = [Cell(WARMUP, mode, first.scenario, first.concurrency, duration_s=warmup_s)]
    return (warmup if warmup_s > 0 else []) + measured


class CellSource(Protocol):
    """Which cell runs when: what the users of a free-running mode read before each request, and
    the load shape before each tick. A fixed `Timeline`, or a search's growing `LevelSchedule`."""

    started_at: float  # wall clock, the same on every process

    def cell_at(self, t: float) -> Cell | None:
        """The cell running at `t`; None when none is (the user idles until `next_change`)."""

    def next_change(self, t: float) -> float:
        """When the cell running at `t` ends, or the next begins."""

    def users_wanted(self, t: float, lookahead_s: float = SHAPE_LOOKAHEAD_S) -> int:
        """How many users the load shape should have spawned at `t`."""


@dataclass(frozen=True)
class Timeline:
    """A free-running run's cells on the wall clock: each starts when the one before ends."""

    cells: tuple[Cell, ...]
    started_at: float  # wall clock, the same on every process

    def bounds(self) -> list[tuple[Cell, float, float]]:
        """(cell, start, end) on the wall clock."""
        out, start = [], self.started_at
        for cell in self.cells:
            out.append((cell, start, start + (cell.duration_s or 0.0)))
            start += cell.duration_s or 0.0
        return out

    @property
    def ends_at(self) -> float:
        return self.started_at + sum(cell.duration_s or 0.0 for cell in self.cells)

    def cell_at(self, t: float) -> Cell | None:
        """The cell running at `t` (the first one before the start), None once the run is over."""
        for cell, _start, end in self.bounds():
            if t < end:
                return cell
        return None

    def next_change(self, t: float) -> float:
        """When the cell running at `t` ends (the run's end once it is over)."""
        return next((end for _cell, _start, end in self.bounds() if t < end), self.ends_at)

    def users_wanted(self, t: float, lookahead_s: float = SHAPE_LOOKAHEAD_S) -> int:
        """The most streams any cell running between `t` and `t + lookahead_s` needs."""
        running = [cell.concurrency for cell, start, end in self.bounds() if start < t + lookahead_s and end > t]
        return max(running, default=self.cells[-1].concurrency)


class TimedDriver(Driver):
    """The coordinator's side of a free-running mode: the cells' start and end as time passes
    (for the phase shown live, the server's per-cell scrapes and the end of the test)."""

    def __init__(self, timeline: Timeline, streams_in_flight: Callable[[], int], **kwargs: Any) -> None:
        super().__init__(users=timeline.cells[0].concurrency, **kwargs)
        self.timeline = timeline
        self.plan = list(timeline.cells)
        self.streams_in_flight = streams_in_flight

    def play(self) -> None:
        for cell, start, end in self.timeline.bounds():
            gevent.sleep(max(start - time.time(), 0.0))
            self.users_wanted = cell.concurrency
            self.cell_events.fire(cell=cell, phase="start")
            self.phase = {"state": "running", "cell": cell.name, "case": cell.case,
                          "concurrency": cell.concurrency, "duration_s": cell.duration_s, "started_at": start}
            gevent.sleep(max(end - time.time(), 0.0))
            if cell is self.timeline.cells[-1]:
                drain(self.streams_in_flight, time.time() + self.request_timeout_s + 5)
            self.cell_events.fire(cell=cell, phase="end")


def free_running_cells(mode: LoadMode, load: Any, users: int, mix: Scenario) -> list[Cell]:
    """The cells of a mode with a fixed timeline, in the order they run: the warm-up, then the
    mode's measured cells (its registry entry's `cells`)."""
    assert mode.cells is not None, f"{mode.name} has no fixed timeline"
    return with_warmup(mode.cells(load, users, mix), mode.name, getattr(load, "warmup_s", 0.0))


def timeline_driver(run: DriverInputs) -> TimedDriver:
    """The coordinator's side of a mode with a fixed timeline, starting at `run.started_at`."""
    mix = Mix(build_scenarios(run.profile), run.profile.seed)
    cells = free_running_cells(run.mode, run.profile.load, run.users, mix)
    return TimedDriver(Timeline(tuple(cells), run.started_at), run.streams_in_flight, **run.common)
