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

- search: levels of closed-loop users or of an open-loop rate, each judged against the profile's
  SLO before the next is chosen (`loadlib.modes.search`), so its cells are not known in advance: the
  coordinator's `SearchDriver` announces each level to every process as it goes, and the users
  read a `LevelSchedule` that grows one level at a time instead of a fixed `Timeline`.

A warm-up (`warmup_s`) first runs the same load as an unmeasured "warmup" cell (in the search,
before every level).
"""

from __future__ import annotations

import random
import time
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

import gevent

from loadlib.records import records_frame
from loadlib.profiles import Profile, SearchLoad, Slo
from loadlib.modes.rounds import Driver
from loadlib.scenarios import Cell, Scenario
from loadlib.modes.search import Search, judge, level_seed

log = logging.getLogger(__name__)

ERROR_PAUSE_S = 0.5  # a closed-loop stream pauses after a failure instead of spinning on it
WARMUP = "warmup"
SHAPE_LOOKAHEAD_S = 1.5  # Locust's shape ticks once a second: spawn a level's users before it starts
SEARCH = "search"
IDLE_POLL_S = 0.2  # how often an idle user of the search looks for its next level
LEVEL_LEAD_S = 0.5  # a search level starts this long after it is announced (messages reach the workers)


def ladder_levels(top: int, levels: list[int] | None = None) -> list[int]:
    """The given levels up to `top`, or 1, 2, 4, ... below `top`, then `top` itself."""
    if levels:
        return [level for level in levels if level <= top] or [top]
    out, level = [], 1
    while level < top:
        out.append(level)
        level *= 2
    return out + [top]


def first_users(profile: Profile | None, users: int) -> int:
    """The users a load mode spawns before its first cell: the ladder's first level, a users
    search's start, else all `users`."""
    load = profile.load if profile is not None else None
    if load is not None and load.mode == "ladder":
        return ladder_levels(users, load.levels)[0]
    if isinstance(load, SearchLoad) and load.variable == "users":
        return min(int(load.start), users)
    return users


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
    """The cells of a closed, ladder, open or trace run, in the order they run: the warm-up, then
    the measured cell (closed, open) or one cell per level (ladder); a trace is one cell."""
    load = profile.load
    if load.mode == "open":
        measured = [Cell(f"open-{load.rate_rps:g}rps", "open", mix, users, duration_s=load.duration_s)]
    elif load.mode == "trace":  # its last request is sent at the end of the cell's time, so one more second
        return [Cell("trace", "trace", mix, users, duration_s=load.duration_s + 1.0)]
    elif load.mode == "ladder":
        measured = [Cell(f"ladder-u{level}", "ladder", mix, level, duration_s=load.duration_s)
                    for level in ladder_levels(users, load.levels)]
    else:
        measured = [Cell("closed", "closed", mix, users, duration_s=load.duration_s)]
    warmup = [Cell(WARMUP, load.mode, mix, measured[0].concurrency, duration_s=load.warmup_s)]
    return (warmup if load.warmup_s > 0 else []) + measured


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


def drain(streams_in_flight: Callable[[], int], deadline: float, settle_s: float = 0.0) -> None:
    """The users send nothing new: wait (until `deadline`) for the requests they sent to end, and
    to stay ended for `settle_s` (a worker reports its requests in flight with each batch of
    records, so a count of 0 is believed once a batch sent after the last request has come)."""
    quiet_since: float | None = None
    while time.time() < deadline:
        if streams_in_flight() > 0:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.time()
        if quiet_since is not None and time.time() - quiet_since >= settle_s:
            return
        gevent.sleep(0.05)


# --- the capacity search ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Span:
    """A search cell's time on the wall clock, as announced to every process; `rate_rps` for
    the open-loop variable; `number` (its place in the search) seeds its arrivals alike on
    every process."""

    cell: Cell
    start: float
    end: float
    number: int
    rate_rps: float | None = None

    def to_message(self) -> dict[str, Any]:
        return {"cell": self.cell.name, "concurrency": self.cell.concurrency, "start": self.start,
                "end": self.end, "number": self.number, "rate_rps": self.rate_rps}

    @classmethod
    def from_message(cls, data: dict[str, Any], mix: Scenario) -> "Span":
        cell = Cell(data["cell"], SEARCH, mix, data["concurrency"], duration_s=data["end"] - data["start"])
        return cls(cell, data["start"], data["end"], data["number"], data["rate_rps"])


class LevelSchedule:
    """A search's cells on the wall clock, announced one level at a time (see `CellSource`)."""

    def __init__(self, started_at: float, first_users: int) -> None:
        self.started_at = started_at
        self.spans: list[Span] = []
        self._first_users = first_users

    def add(self, span: Span) -> None:
        self.spans.append(span)

    def cell_at(self, t: float) -> Cell | None:
        return next((span.cell for span in reversed(self.spans) if span.start <= t < span.end), None)

    def next_change(self, t: float) -> float:
        """The next start or end after `t`; while none is announced, a short poll."""
        return min((edge for span in self.spans for edge in (span.start, span.end) if edge > t),
                   default=t + IDLE_POLL_S)

    def users_wanted(self, t: float, lookahead_s: float = SHAPE_LOOKAHEAD_S) -> int:
        """The most streams any level so far (or starting within the look-ahead) needs: users are
        never stopped, since Locust stops whichever it likes and would leave a lower level's
        stream numbers with gaps; a user above the level idles."""
        return max((span.cell.concurrency for span in self.spans if span.start < t + lookahead_s),
                   default=self._first_users)


@dataclass(frozen=True)
class SearchHooks:
    """What the search driver needs from the session that runs it."""

    announce: Callable[[dict[str, Any]], None]  # a span's message to every process that runs users
    records: Callable[[], Iterable[dict[str, Any]]]  # the run's records so far (the journal)
    note: Callable[[str, Any], None]  # a key of the manifest (the session writes it)
    settle_s: float  # how long 0 requests in flight must hold before a level's records are all in


class SearchDriver(Driver):
    """The coordinator's side of the search mode: runs one level (its warm-up, then `duration_s`
    measured), waits for its requests to end, judges it from its records in the journal, and
    chooses the next (`loadlib.modes.search.Search`); the result goes to the manifest after every level.

    Users variable: the load shape spawns the level's users (never fewer than any level so far;
    see `LevelSchedule.users_wanted`). Rate variable: each process sends its share of the level's
    arrivals, with `users` free users to send them.
    """

    def __init__(self, load: SearchLoad, slo: Slo, mix: Scenario, users: int, started_at: float,
                 streams_in_flight: Callable[[], int], hooks: SearchHooks, **kwargs: Any) -> None:
        top = float(users) if load.variable == "users" else float(load.max_rate or 0)
        self.search = Search(load.variable, load.start, top, load.step, load.precision, load.repeats)
        super().__init__(users=users, **kwargs)
        self.load, self.slo, self.mix = load, slo, mix
        self.timeline = LevelSchedule(started_at, int(self.search.start) if load.variable == "users" else users)
        self.users = users  # -u: the users search's top, the rate search's free users
        self.plan: list[Cell] = []
        self.streams_in_flight = streams_in_flight
        self.hooks = hooks

    def play(self) -> None:
        start = self.timeline.started_at
        while (step := self.search.next_step()) is not None:
            cell = self._run_level(step.value, step.cell, start)
            self.phase = {**self.phase, "search": f"judging {cell.name}; {self.search.progress()}"}
            records = (record for record in self.hooks.records() if record["cell"] in step.cells)
            judgement = judge(records_frame(records), self.slo, level_seed(step.cells))
            self.search.record(step, judgement)
            log.info("search: %s %s (pass share %.2f, %d requests)", cell.name, judgement.verdict,
                     judgement.pass_share, judgement.n)
            self.hooks.note(SEARCH, self.search.result(self.slo))
            start = time.time() + LEVEL_LEAD_S
        log.info("search: best %s (%s)", self.search.best, self.search.stopped)
        self.hooks.note(SEARCH, self.search.result(self.slo))

    def _run_level(self, value: float, name: str, start: float) -> Cell:
        """Announces the level's warm-up and measured spans, plays them, and waits until its
        requests have ended."""
        users_variable = self.load.variable == "users"
        concurrency = int(value) if users_variable else self.users
        rate = None if users_variable else value
        number = len(self.timeline.spans)
        spans = [Span(Cell(WARMUP, SEARCH, self.mix, concurrency, duration_s=self.load.warmup_s), start,
                      start + self.load.warmup_s, number, rate)] if self.load.warmup_s > 0 else []
        measured_start = start + self.load.warmup_s
        cell = Cell(name, SEARCH, self.mix, concurrency, duration_s=self.load.duration_s)
        spans.append(Span(cell, measured_start, measured_start + self.load.duration_s, number + len(spans), rate))
        for span in spans:
            self.timeline.add(span)
            self.hooks.announce(span.to_message())
        self.plan.append(cell)
        self.phase = {"state": "running", "cell": name, "case": SEARCH, "concurrency": concurrency,
                      "duration_s": spans[-1].end - start, "started_at": start,
                      "search": f"level {len(self.search.order) + 1}: {name}; {self.search.progress()}"}
        gevent.sleep(max(measured_start - time.time(), 0.0))
        self.cell_events.fire(cell=cell, phase="start")
        gevent.sleep(max(spans[-1].end - time.time(), 0.0))
        drain(self.streams_in_flight, time.time() + self.request_timeout_s + 5, self.hooks.settle_s)
        self.cell_events.fire(cell=cell, phase="end")
        return cell
