"""The free-running load modes: closed, ladder and open (the rounds mode is `protocol.Conductor`).

- closed: `-u` streams, each sending its next request as soon as the last one ended, for
  `duration_s`; their first requests start at jittered moments, not in one burst.
- ladder: the closed mode stepped through concurrency levels (1, 2, 4, ... up to `-u`), the
  load shape spawning each level's users; every level is its own cell ("ladder-u4").
- open: arrivals at a fixed rate (evenly spaced, or a Poisson process), sent whether or not
  earlier requests have ended. Each arrival has a scheduled start; when no user is free at that
  moment it waits on the client, and the wait is recorded apart as `queue_s`.

A warm-up (`warmup_s`) first runs the same load as an unmeasured "warmup" cell.
"""

from __future__ import annotations

import random
import time
from typing import Any

import gevent
from gevent.event import Event

from loadlib.protocol import Assignment, Driver
from loadlib.scenarios import COLD, Cell, Scenario

ERROR_PAUSE_S = 0.5  # a closed-loop stream pauses after a failure instead of spinning on it
WARMUP = "warmup"


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


class _FreeRunning(Driver):
    """Shared by the free-running modes: the mix, its preparation, the warm-up, the drain."""

    def __init__(self, mix: Scenario, warmup_s: float, seed: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mix = mix
        self.warmup_s = warmup_s
        self.rng = random.Random(seed)
        self.stopping = False
        self.drained = Event()

    def setup(self, users: int) -> None:
        """Users spawned, the cache flushed if a scenario wants it cold, then priming and
        calibration (in that order, so that the flush does not undo the priming)."""
        self.wait_for_users(users)
        if self.mix.cache == COLD:
            self.flush_cache()
        self.prepare(self.mix)

    def begin(self, cell: Cell) -> None:
        self.cell_events.fire(cell=cell, phase="start")
        self.phase = {"state": "running", "cell": cell.name, "case": cell.case,
                      "concurrency": cell.concurrency, "duration_s": cell.duration_s,
                      "started_at": time.time()}

    def drain(self) -> None:
        """Stops sending and waits (bounded) until every request sent has reported back."""
        self.stopping = True
        if self.in_flight:
            self.drained.wait(timeout=self.request_timeout_s + 60)

    def check_drained(self) -> None:
        if self.stopping and not self.in_flight:
            self.drained.set()


class ClosedDriver(_FreeRunning):
    """closed (one level) and ladder (several): each level keeps `level` streams busy."""

    def __init__(self, mix: Scenario, mode: str, levels: list[int], duration_s: float,
                 warmup_s: float = 0.0, jitter_s: float = 1.0, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(mix, warmup_s, seed, users=levels[0], **kwargs)
        self.jitter_s = jitter_s
        warmup = [Cell(WARMUP, mode, mix, levels[0], duration_s=warmup_s)] if warmup_s > 0 else []
        self.plan = warmup + [Cell(f"ladder-u{level}" if mode == "ladder" else mode, mode, mix, level,
                                   duration_s=duration_s) for level in levels]
        self.cell: Cell | None = None
        self.streams = 0

    def play(self) -> None:
        self.setup(self.plan[0].concurrency)
        for cell in self.plan:
            self.users_wanted = cell.concurrency
            self.wait_for_users(cell.concurrency)
            self._level(cell)
        self.drain()
        self.cell_events.fire(cell=self.plan[-1], phase="end")

    def _level(self, cell: Cell) -> None:
        """Switches the streams' next requests to `cell`, adds its new streams, holds it."""
        previous, self.cell = self.cell, cell
        if previous is not None:
            self.cell_events.fire(cell=previous, phase="end")
        self.begin(cell)
        now = time.time() + self.lead_time_s
        new = range(self.streams, cell.concurrency)
        self.dispatch([self._assign(stream, now + self.rng.uniform(0, self.jitter_s)) for stream in new])
        self.streams = max(self.streams, cell.concurrency)
        gevent.sleep(cell.duration_s)

    def _assign(self, stream: int, start_at: float) -> Assignment:
        cell = self.cell
        return self.assign(self.mix.next(stream), cell, start_at, stream, measured=cell.name != WARMUP,
                           then=lambda record: self._again(stream, record))

    def _again(self, stream: int, record: dict[str, Any]) -> None:
        if self.stopping:
            self.check_drained()
            return
        pause = ERROR_PAUSE_S if record.get("error") else 0.0
        self.dispatch([self._assign(stream, time.time() + pause)])


class OpenDriver(_FreeRunning):
    """open: arrivals on a schedule, whatever the state of earlier requests."""

    def __init__(self, mix: Scenario, rate_rps: float, arrival: str, duration_s: float, users: int,
                 warmup_s: float = 0.0, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(mix, warmup_s, seed, users=users, **kwargs)
        self.rate_rps = rate_rps
        self.arrival = arrival
        warmup = [Cell(WARMUP, "open", mix, users, duration_s=warmup_s)] if warmup_s > 0 else []
        self.plan = warmup + [Cell(f"open-{rate_rps:g}rps", "open", mix, users, duration_s=duration_s)]

    def play(self) -> None:
        users = self.users_wanted
        self.setup(users)
        measured = self.plan[-1]
        offsets = arrival_offsets(self.rate_rps, self.arrival, self.warmup_s + measured.duration_s, self.rng)
        start = time.time() + self.lead_time_s
        cell = None
        for index, offset in enumerate(offsets):
            now_cell = self.plan[0] if offset < self.warmup_s else measured
            if now_cell is not cell:
                if cell is not None:
                    self.cell_events.fire(cell=cell, phase="end")
                cell = now_cell
                self.begin(cell)
            delay = start + offset - self.lead_time_s - time.time()
            if delay > 0:
                gevent.sleep(delay)
            stream = index % users
            self.dispatch([self.assign(self.mix.next(stream), cell, start + offset, stream,
                                       measured=cell is measured, then=lambda _record: self.check_drained())])
        self.drain()
        if cell is not None:
            self.cell_events.fire(cell=cell, phase="end")
