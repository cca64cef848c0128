"""Load mode `search`: levels of closed-loop users or of an open-loop rate, each judged against the
profile's SLO before the next is chosen (`loadlib.modes.search`), so its cells are not known in
advance: the coordinator's `SearchDriver` announces each level to every process as it goes, and the
users read a `LevelSchedule` that grows one level at a time instead of a fixed `Timeline`. A
warm-up (`warmup_s`) runs before every level.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal

import gevent
from pydantic import (Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, ValidationInfo, field_validator,
                      model_validator)

from loadlib.modes.driver import Driver, DriverInputs, LoadMode, drain
from loadlib.modes.search import Search, judge, level_seed
from loadlib.modes.timeline import SHAPE_LOOKAHEAD_S
from loadlib.records import records_frame
from loadlib.scenarios import Cell, Mix, Scenario, build_scenarios
from loadlib.scenarios.base import WARMUP
from loadlib.scenarios.spec import Strict

if TYPE_CHECKING:
    from loadlib.profiles import Slo

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.2  # how often an idle user of the search looks for its next level
LEVEL_LEAD_S = 0.5  # a search level starts this long after it is announced (messages reach the workers)


class SearchLoad(Strict):
    """Capacity search: levels of `variable` (closed-loop users, or an open-loop rate) judged
    against the profile's [slo]; see `loadlib.modes.search`."""

    mode: Literal["search"]
    variable: Literal["users", "rate"]
    duration_s: PositiveFloat  # measured, per level
    warmup_s: NonNegativeFloat = 0.0  # per level, before its measured part
    start: PositiveFloat = 1.0  # the first level (users, or requests/s)
    step: float = Field(2.0, gt=1)  # the climb multiplies the level by this until the SLO breaks
    max_rate: PositiveFloat | None = None  # rate: the highest rate tried (users: -u)
    precision: float = Field(0.1, ge=0.01, lt=1)  # rate: bisection ends when the bracket is this share of it
    arrival: Literal["constant", "poisson"] = "constant"  # rate
    jitter_s: NonNegativeFloat = 1.0  # users: first requests start spread over this many seconds
    repeats: NonNegativeInt = 1  # a level too close to call runs again this many times

    @field_validator("max_rate", "precision", "arrival")
    @classmethod
    def _rate_only(cls, value: Any, info: ValidationInfo) -> Any:
        """Set for a users search, it would be ignored: refused (its default passes, as a dumped
        profile sent to the workers has every key)."""
        if info.data.get("variable") == "users" and value != cls.model_fields[info.field_name].default:
            raise ValueError('only for variable = "rate" (a users search stops at -u)')
        return value

    @field_validator("jitter_s")
    @classmethod
    def _users_only(cls, value: float, info: ValidationInfo) -> float:
        if info.data.get("variable") == "rate" and value != cls.model_fields[info.field_name].default:
            raise ValueError('only for variable = "users"')
        return value

    @field_validator("start")
    @classmethod
    def _whole_users(cls, start: float, info: ValidationInfo) -> float:
        if info.data.get("variable") == "users" and start != int(start):
            raise ValueError(f"a number of users, got {start:g}")
        return start

    @model_validator(mode="after")
    def _rate_has_a_ceiling(self) -> "SearchLoad":
        if self.variable == "rate" and self.max_rate is None:
            raise ValueError('variable = "rate" needs max_rate (the highest rate tried)')
        return self


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
        cell = Cell(data["cell"], CASE, mix, data["concurrency"], duration_s=data["end"] - data["start"])
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
            self.hooks.note(CASE, self.search.result(self.slo))
            start = time.time() + LEVEL_LEAD_S
        log.info("search: best %s (%s)", self.search.best, self.search.stopped)
        self.hooks.note(CASE, self.search.result(self.slo))

    def _run_level(self, value: float, name: str, start: float) -> Cell:
        """Announces the level's warm-up and measured spans, plays them, and waits until its
        requests have ended."""
        users_variable = self.load.variable == "users"
        concurrency = int(value) if users_variable else self.users
        rate = None if users_variable else value
        number = len(self.timeline.spans)
        spans = [Span(Cell(WARMUP, CASE, self.mix, concurrency, duration_s=self.load.warmup_s), start,
                      start + self.load.warmup_s, number, rate)] if self.load.warmup_s > 0 else []
        measured_start = start + self.load.warmup_s
        cell = Cell(name, CASE, self.mix, concurrency, duration_s=self.load.duration_s)
        spans.append(Span(cell, measured_start, measured_start + self.load.duration_s, number + len(spans), rate))
        for span in spans:
            self.timeline.add(span)
            self.hooks.announce(span.to_message())
        self.plan.append(cell)
        self.phase = {"state": "running", "cell": name, "case": CASE, "concurrency": concurrency,
                      "duration_s": spans[-1].end - start, "started_at": start,
                      "search": f"level {len(self.search.order) + 1}: {name}; {self.search.progress()}"}
        gevent.sleep(max(measured_start - time.time(), 0.0))
        self.cell_events.fire(cell=cell, phase="start")
        gevent.sleep(max(spans[-1].end - time.time(), 0.0))
        drain(self.streams_in_flight, time.time() + self.request_timeout_s + 5, self.hooks.settle_s)
        self.cell_events.fire(cell=cell, phase="end")
        return cell


def search_driver(run: DriverInputs) -> SearchDriver:
    assert run.search is not None, "the search mode needs the session's hooks"
    mix = Mix(build_scenarios(run.profile), run.profile.seed)
    return SearchDriver(run.profile.load, run.profile.slo, mix, run.users, run.started_at, run.streams_in_flight,
                        run.search, **run.common)


def search_first_users(load: SearchLoad, users: int) -> int:
    """A users search spawns its start; a rate search all its free users."""
    return min(int(load.start), users) if load.variable == "users" else users


SEARCH = LoadMode(SearchLoad, search_driver, first_users=search_first_users, levelled=True,
                  fixed_streams="the search chooses each level from the verdicts so far",
                  sends_arrivals=lambda load: load.variable == "rate")
CASE = SEARCH.name  # the case of its cells, and its key in the manifest
