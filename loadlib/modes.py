"""The free-running load modes: closed, ladder and open (the rounds mode is `protocol.Conductor`).

They run where the users are (the local process, or each Locust worker); the coordinating process
only keeps time. A run's cells follow each other on the wall clock from the run's start, which the
coordinator announces once per run, so every process reads the same `Timeline` and knows which cell
a request belongs to without asking anyone:

- closed: `-u` streams, each Locust user sending its next request as soon as its last one ended,
  for `duration_s`; their first requests start at jittered moments, not in one burst.
- ladder: the closed mode stepped through concurrency levels (1, 2, 4, ... up to `-u`), the load
  shape spawning each level's users; every level is its own cell ("ladder-u4").
- open: arrivals at a fixed rate (evenly spaced, or a Poisson process), sent whether or not earlier
  requests have ended. Every process draws the same seeded schedule and sends its share of it
  (arrival i goes to process i mod processes); an arrival with no free user waits on the client,
  and the wait is recorded apart as `queue_s`.

A warm-up (`warmup_s`) first runs the same load as an unmeasured "warmup" cell.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable

import gevent

from loadlib.profiles import Profile
from loadlib.protocol import Driver
from loadlib.scenarios import Cell, Scenario

ERROR_PAUSE_S = 0.5  # a closed-loop stream pauses after a failure instead of spinning on it
WARMUP = "warmup"
SHAPE_LOOKAHEAD_S = 1.5  # Locust's shape ticks once a second: spawn a level's users before it starts


def ladder_levels(top: int, levels: list[int] | None = None) -> list[int]:
    """The given levels up to `top`, or 1, 2, 4, ... below `top`, then `top` itself."""
    if levels:
        return [level for level in levels if level <= top] or [top]
    out, level = [], 1
    while level < top:
        out.append(level)
        level *= 2
    return out + [top]


def arrival_offsets(rate_rps: float, arrival: str, span_s: float, rng: random.Random) -> list[float]:
    """Arrival times in seconds from the start: evenly spaced (`constant`) or with exponential
    gaps (`poisson`), all before `span_s`."""
    if arrival == "constant":
        return [i / rate_rps for i in range(int(span_s * rate_rps + 1e-9))]
    offsets, t = [], 0.0
    while t < span_s:
        offsets.append(t)
        t += rng.expovariate(rate_rps)
    return offsets


def free_running_cells(profile: Profile, users: int, mix: Scenario) -> list[Cell]:
    """The cells of a closed, ladder or open run, in the order they run: the warm-up, then the
    measured cell (closed, open) or one cell per level (ladder)."""
    load = profile.load
    if load.mode == "open":
        measured = [Cell(f"open-{load.rate_rps:g}rps", "open", mix, users, duration_s=load.duration_s)]
    elif load.mode == "ladder":
        measured = [Cell(f"ladder-u{level}", "ladder", mix, level, duration_s=load.duration_s)
                    for level in ladder_levels(users, load.levels)]
    else:
        measured = [Cell("closed", "closed", mix, users, duration_s=load.duration_s)]
    warmup = [Cell(WARMUP, load.mode, mix, measured[0].concurrency, duration_s=load.warmup_s)]
    return (warmup if load.warmup_s > 0 else []) + measured


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
                self._drain()
            self.cell_events.fire(cell=cell, phase="end")

    def _drain(self) -> None:
        """The users send nothing new after the last cell: wait (bounded) until the requests
        they sent have ended, so that every one of them is recorded."""
        deadline = time.time() + self.request_timeout_s + 5
        while self.streams_in_flight() > 0 and time.time() < deadline:
            gevent.sleep(0.05)
