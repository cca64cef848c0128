"""Load mode `search`: levels of closed-loop users or of an open-loop rate, each judged against the
profile's SLO before the next is chosen (`loadlib.modes.search`), so its cells are not known in
advance: the coordinator's `SearchDriver` announces each level to every process as it goes, and the
users read a `LevelSchedule` that grows one level at a time instead of a fixed `Timeline`. A
warm-up (`warmup_s`) runs before every level. A search over agent sessions (`variable =
"sessions"`, the profile's `agent-trace` scenario) plays each level as a sessions cell of N lanes
for `duration_s` (`SessionsSearchDriver`, through the sessions mode's driver and lanes), its own
texts so that no earlier level's sessions are in the cache.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal

import gevent
from pydantic import (Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, ValidationInfo, field_validator,
                      model_validator)

from loadlib import clock
from loadlib.modes.arrivals import ArrivalSlots
from loadlib.modes.base import Coordination, Driver, DriverOfDrivers, LoadMode, ModeState, Phase, target_labels
from loadlib.modes.sessions import SESSIONS, SessionLanes, SessionsDriver, SessionsLoad, agent_trace
from loadlib.modes.timeline import SHAPE_LOOKAHEAD_S, ScenarioStreams
from loadlib.scenarios import COLD, Cell, Mix, Scenario, build_scenarios
from loadlib.scenarios.base import WARMUP
from loadlib.scenarios.spec import Strict

if TYPE_CHECKING:
    from loadlib.figures.goodput import Slo
    from loadlib.profiles import Profile
    from loadlib.run.config import RunConfig

log = logging.getLogger("uni-bench")

IDLE_POLL_S = 0.2  # how often an idle user of the search looks for its next level
LEVEL_LEAD_S = 0.5  # a search level starts this long after it is announced (messages reach the workers)


class SearchLoad(Strict):
    """Capacity search: levels of `variable` (closed-loop users, an open-loop rate, or agent
    sessions) judged against the profile's [slo]; see `loadlib.modes.search`."""

    mode: Literal["search"]
    variable: Literal["users", "rate", "sessions"]
    duration_s: PositiveFloat  # measured, per level
    warmup_s: NonNegativeFloat = 0.0  # per level, before its measured part
    start: PositiveFloat = 1.0  # the first level (users, sessions, or requests/s)
    step: float = Field(2.0, gt=1)  # the climb multiplies the level by this until the SLO breaks
    max_rate: PositiveFloat | None = None  # rate: the highest rate tried (users, sessions: -u)
    precision: float = Field(0.1, ge=0.01, lt=1)  # rate: bisection ends when the bracket is this share of it
    arrival: Literal["constant", "poisson"] = "constant"  # rate
    jitter_s: NonNegativeFloat = 1.0  # users: first requests start spread over this many seconds
    repeats: NonNegativeInt = 1  # a level too close to call runs again this many times

    @field_validator("max_rate", "precision", "arrival")
    @classmethod
    def _rate_only(cls, value: Any, info: ValidationInfo) -> Any:
        """Set for a users search, it would be ignored: refused (its default passes, as a dumped
        profile sent to the workers has every key)."""
        variable = info.data.get("variable")
        if variable not in (None, "rate") and value != cls.model_fields[info.field_name].default:
            raise ValueError(f'only for variable = "rate" (a search over {variable} stops at -u)')
        return value

    @field_validator("jitter_s")
    @classmethod
    def _users_only(cls, value: float, info: ValidationInfo) -> float:
        if info.data.get("variable") != "users" and value != cls.model_fields[info.field_name].default:
            raise ValueError('only for variable = "users"')
        return value

    @field_validator("warmup_s")
    @classmethod
    def _not_for_sessions(cls, value: float, info: ValidationInfo) -> float:
        if info.data.get("variable") == "sessions" and value:
            raise ValueError('not for variable = "sessions": a level is a sessions cell, its lanes start together')
        return value

    @field_validator("start")
    @classmethod
    def _whole_users(cls, start: float, info: ValidationInfo) -> float:
        if info.data.get("variable") not in (None, "rate") and start != int(start):
            raise ValueError(f"a number of {info.data['variable']}, got {start:g}")
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
                "end": self.end, "number": self.number, "rate_rps": self.rate_rps, "target": self.cell.target,
                "measured": self.cell.measured}

    @classmethod
    def from_message(cls, data: dict[str, Any], mix: Scenario) -> "Span":
        cell = Cell(data["cell"], CASE, mix, data["concurrency"], duration_s=data["end"] - data["start"],
                    target=data["target"], measured=data["measured"])
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


class SearchDriver(Driver):
    """The coordinator's side of the search mode: runs one level (its warm-up, then `duration_s`
    measured), waits for its requests to end, judges it from its records in the journal, and
    chooses the next (`loadlib.modes.search.Search`); the result goes to the manifest after every level.

    Users variable: the load shape spawns the level's users (never fewer than any level so far;
    see `LevelSchedule.users_wanted`). Rate variable: each process sends its share of the level's
    arrivals, with `users` free users to send them.
    """

    def __init__(self, run: Coordination, users: int, load: SearchLoad, slo: Slo, mix: Scenario,
                 started_at: float, target: str = "") -> None:
        from loadlib.modes.search import Search  # tables (pandas): workers import this module for its schema

        super().__init__(run, users)
        self.target = target  # the one server it searches (a sweep's configuration), by label
        top = float(load.max_rate or 0) if load.variable == "rate" else float(users)
        self.search = Search(load.variable, load.start, top, load.step, load.precision, load.repeats)
        self.load, self.slo, self.mix = load, slo, mix
        self.timeline = LevelSchedule(started_at, search_first_users(load, users))

    def users_wanted(self, now: float) -> int:
        return self.timeline.users_wanted(now)

    def play(self) -> None:
        for _cell in self.levels():
            pass

    def levels(self) -> Iterator[Cell]:
        """The search, one level at a time (an A/B run alternates its targets' searches level by
        level): each level played, judged, and the result noted before the next is chosen."""
        # Tables (pandas), loaded by the coordinator only: workers import this module for its schema.
        from loadlib.figures.capacity import level_seed
        from loadlib.modes.search import judge

        if self.mix.cache == COLD:
            self.flush_cache(self.target)
        while (step := self.search.next_step()) is not None:
            start = clock.now() + LEVEL_LEAD_S if self.timeline.spans else self.timeline.started_at
            cell = self._run_level(step.value, step.cell, start)
            if self.stopped:
                return
            self.phase = self.phase.with_note(f"judging {cell.name}; {self.search.progress()}")
            offered = step.value if self.load.variable == "rate" else None
            judgement = judge(self.run.cell_frame(step.cells, self.target), self.slo, level_seed(step.cells), offered,
                              self.run.resample)
            self.search.record(step, judgement)
            log.info("search: %s%s %s (%d requests: %s)", f"{self.target}: " if self.target else "",
                     cell.name, judgement.verdict, judgement.n, judgement.reason)
            self.run.note(CASE, self.search.result(self.slo))
            yield cell
        log.info("search: %sbest %s (%s)", f"{self.target}: " if self.target else "", self.search.best,
                 self.search.stopped)
        self.run.note(CASE, self.search.result(self.slo))

    def _run_level(self, value: float, name: str, start: float) -> Cell:
        """Announces the level's warm-up and measured spans, plays them, and waits until its
        requests have ended."""
        users_variable = self.load.variable == "users"
        concurrency = int(value) if users_variable else self.users
        rate = None if users_variable else value
        number = len(self.timeline.spans)
        warmup = Cell(WARMUP, CASE, self.mix, concurrency, duration_s=self.load.warmup_s, target=self.target,
                      measured=False)
        spans = [Span(warmup, start, start + self.load.warmup_s, number, rate)] if self.load.warmup_s > 0 else []
        measured_start = start + self.load.warmup_s
        cell = Cell(name, CASE, self.mix, concurrency, duration_s=self.load.duration_s, target=self.target)
        spans.append(Span(cell, measured_start, measured_start + self.load.duration_s, number + len(spans), rate))
        for span in spans:
            self.timeline.add(span)
            self.run.announce(span.to_message())
        self.plan.append(cell)
        log.info("search: %slevel %d, %s", f"{self.target}: " if self.target else "", len(self.search.order) + 1,
                 f"{concurrency} user{'s' * (concurrency != 1)}" if users_variable else f"{rate:g} req/s")
        note = f"level {len(self.search.order) + 1}: {name}; {self.search.progress()}"
        self.phase = Phase("running", name, CASE, concurrency, duration_s=spans[-1].end - start, started_at=start,
                           note=note, target=self.target)
        gevent.sleep(max(measured_start - clock.now(), 0.0))
        self.run.cell_events.fire(cell=cell, phase="start")
        gevent.sleep(max(spans[-1].end - clock.now(), 0.0))
        self.drain(clock.now() + self.run.request_timeout_s + 5)
        self.end_cell(cell)
        return cell


class SessionsSearchDriver(SearchDriver):
    """A search over agent sessions: each level a cell of N lanes (`-u`: the most tried) played for
    `duration_s` by the sessions mode's driver (`SessionsDriver.play_cell`), on texts of its own
    (salted by the level's cell: none of an earlier level's sessions is cached, its ideal starts
    empty); the prompts measured once, before the first level. Its turns are judged as a level of
    users' requests are."""

    wants_records = True  # the sessions driver waits for its probes' records

    def __init__(self, run: Coordination, users: int, profile: "Profile", started_at: float) -> None:
        load: SearchLoad = profile.load
        super().__init__(run, users, load, profile.slo, agent_trace(profile), started_at, target_labels(profile)[0])
        lanes = SessionsLoad(mode="sessions", sessions=int(load.start), duration_s=load.duration_s)
        self.lanes = SessionsDriver(run, users, profile.model_copy(update={"load": lanes}))

    def users_wanted(self, now: float) -> int:
        return self.lanes.users_wanted(now)

    def on_record(self, record: dict[str, Any]) -> None:
        self.lanes.on_record(record)

    def _run_level(self, value: float, name: str, start: float) -> Cell:
        """The level's lanes from when their users are there (`start` is for announced spans)."""
        lanes = int(value)
        cell = Cell(name, CASE, self.mix, lanes, duration_s=self.load.duration_s, target=self.target)
        if not self.plan and not self.lanes.measure_prompts(cell):
            self.stopped = self.lanes.stopped
            return cell
        self.plan.append(cell)
        log.info("search: %slevel %d, %d session%s", f"{self.target}: " if self.target else "",
                 len(self.search.order) + 1, lanes, "s" * (lanes != 1))
        self.phase = Phase("running", name, CASE, lanes, duration_s=self.load.duration_s, started_at=clock.now(),
                           note=f"level {len(self.search.order) + 1}: {name}; {self.search.progress()}",
                           target=self.target)
        self.lanes.play_cell(cell, salt=f"|{name}")
        self.stopped = self.lanes.stopped
        return cell


class AlternatingSearches(DriverOfDrivers):
    """An A/B run's search: each target's own search on one shared schedule, a level of A, then a
    level of B, and so on until each has its answer, so both see the same client and hour. Each
    target's result goes to the manifest's `search_by_target`."""

    def __init__(self, run: Coordination, users: int, searches: list[SearchDriver]) -> None:
        super().__init__(run, users)
        self.searches = searches
        self.inner = searches[0]

    def play(self) -> None:
        playing = {search: search.levels() for search in self.searches}
        while playing:
            for search, levels in list(playing.items()):
                self.inner = search
                cell = next(levels, None)
                if cell is None:
                    del playing[search]
                else:
                    self.plan.append(cell)


def search_first_users(load: SearchLoad, users: int) -> int:
    """A users search spawns its start; a sessions search as many (its lanes' users are at least
    that: more would be stopped, whichever Locust picks, mid-turn); a rate search all its free users."""
    return users if load.variable == "rate" else min(int(load.start), users)


class LevelledStreams(ScenarioStreams):
    """The users' half of a users search: the scenarios' streams, labelled with the level
    announced for their send time; a stream above the level idles."""

    def __init__(self, schedule: LevelSchedule, mix: Scenario, jitter_s: float) -> None:
        super().__init__(schedule, jitter_s, levelled=True)
        self.mix = mix

    def on_message(self, data: dict[str, Any]) -> None:
        self.cells.add(Span.from_message(data, self.mix))


class LevelledArrivals(ArrivalSlots):
    """The users' half of a rate search: free users, and for each level announced this
    process's share of its arrivals (seeded by the level's place, alike on every process)."""

    def __init__(self, schedule: LevelSchedule, mix: Scenario, users: int, share: tuple[int, int],
                 seed: int, arrival: str) -> None:
        super().__init__(mix, users, share)
        self.schedule, self.seed, self.arrival = schedule, seed, arrival

    def on_message(self, data: dict[str, Any]) -> None:
        span = Span.from_message(data, self.mix)
        self.schedule.add(span)
        gevent.spawn(self.feed_rate, span.start, span.end, span.rate_rps, self.arrival,
                     random.Random(f"{self.seed}/{span.number}"), random.Random(f"{self.seed}/{span.number}/picks"),
                     lambda _at: span.cell)


class SearchMode(LoadMode):
    schema = SearchLoad
    fixed_streams = "the search chooses each level from the verdicts so far"

    def user_kind(self, load: SearchLoad) -> str:
        return "per_scenario" if load.variable == "users" else "free_slots"

    def first_users(self, load: SearchLoad, users: int) -> int:
        return search_first_users(load, users)

    def driver(self, profile: "Profile", users: int, started_at: float, run: Coordination) -> Driver:
        """The search; in an A/B run one per target, alternating level by level on one schedule."""
        labels = target_labels(profile)
        if profile.load.variable == "sessions":
            return SessionsSearchDriver(run, users, profile, started_at)
        if len(labels) == 1:
            mix = Mix(build_scenarios(profile), profile.seed)
            return SearchDriver(run, users, profile.load, profile.slo, mix, started_at, labels[0])
        results: dict[str, Any] = {}

        def note_for(label: str) -> Callable[[str, Any], None]:
            def note(key: str, value: Any) -> None:
                if key != CASE:
                    return run.note(key, value)
                results[label] = value
                run.note(BY_TARGET, dict(results))
            return note
        searches = [SearchDriver(replace(run, note=note_for(label)), users, profile.load, profile.slo,
                                 Mix(build_scenarios(profile), profile.seed), started_at, label) for label in labels]
        for search in searches[1:]:
            search.timeline = searches[0].timeline  # one schedule: the users' (spans numbered alike)
        return AlternatingSearches(run, users, searches)

    def begin(self, config: "RunConfig", share: tuple[int, int]) -> ModeState:
        profile = config.profile
        load: SearchLoad = profile.load
        mix = Mix(build_scenarios(profile), profile.seed)
        schedule = LevelSchedule(config.started_at, search_first_users(load, config.users))
        if load.variable == "rate":
            return LevelledArrivals(schedule, mix, config.users, share, profile.seed, load.arrival)
        if load.variable == "sessions":
            return SessionLanes(config, share)
        return LevelledStreams(schedule, mix, load.jitter_s)

    def notes(self, profile: "Profile", context_tokens: int | None) -> dict[str, Any]:
        """A search over sessions: the sessions mode's notes of its trace."""
        if profile.load.variable != "sessions":
            return {}
        return SESSIONS.notes(profile, context_tokens)


SEARCH = SearchMode()
CASE = SEARCH.name  # the case of its cells, and its key in the manifest
BY_TARGET = f"{CASE}_by_target"  # an A/B run's results, by target label
