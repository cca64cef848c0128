"""What the free-running load modes (closed, ladder, open, trace; the search in its own way) share.

Their requests are sent where the users are (the local process, or each Locust worker); the
coordinating process only keeps time. A run's cells follow each other on the wall clock from the run's start, which the
coordinator announces once per run, so every process reads the same `Timeline` and knows which cell
a request belongs to without asking anyone. A warm-up (`warmup_s`) first runs the same load as an
unmeasured "warmup" cell.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import random
from typing import TYPE_CHECKING, Any, Protocol

import gevent

from loadlib import clock
from loadlib.modes.base import Coordination, Driver, LoadMode, ModeState, alternate, target_labels
from loadlib.scenarios import COLD, Cell, Mix, Scenario, build_scenarios
from loadlib.scenarios.base import WARMUP

if TYPE_CHECKING:
    from loadlib.profiles import Profile
    from loadlib.run.config import RunConfig
    from loadlib.run.users import LLMUser, ScenarioUser

ERROR_PAUSE_S = 0.5  # a closed-loop stream pauses after a failure instead of spinning on it
SHAPE_LOOKAHEAD_S = 1.5  # Locust's shape ticks once a second: spawn a level's users before it starts


def with_warmup(measured: list[Cell], mode: str, warmup_s: float) -> list[Cell]:
    """The measured cells, after an unmeasured warm-up of the first one's load when `warmup_s` > 0."""
    first = measured[0]
    warmup = [Cell(WARMUP, mode, first.scenario, first.concurrency, duration_s=warmup_s, measured=False)]
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
    (for the phase shown live, the server's per-cell scrapes and the end of the test); a cold mix
    has the prefix cache flushed before any request."""

    def __init__(self, run: Coordination, users: int, timeline: Timeline, cold: bool) -> None:
        super().__init__(run, users)
        self.timeline = timeline
        self.plan = list(timeline.cells)
        self.cold = cold

    def play(self) -> None:
        if self.cold:
            for target in dict.fromkeys(cell.target for cell in self.plan):
                self.flush_cache(target)
        for cell, start, end in self.timeline.bounds():
            gevent.sleep(max(start - clock.now(), 0.0))
            self.start_cell(cell, duration_s=cell.duration_s, started_at=start)
            gevent.sleep(max(end - clock.now(), 0.0))
            if cell is self.timeline.cells[-1]:
                self.drain(clock.now() + self.run.request_timeout_s + 5)
            self.end_cell(cell)

    def users_wanted(self, now: float) -> int:
        return self.timeline.users_wanted(now)


class ScenarioStreams(ModeState):
    """The users' half of a mode whose users are its scenarios' closed-loop streams (one Locust
    user class per scenario, by weight): each request is labelled with the cell running at its
    send time; in a levelled mode (ladder, a users search) a stream above the level idles."""

    def __init__(self, cells: CellSource, jitter_s: float, levelled: bool) -> None:
        self.cells = cells
        self.jitter_s = jitter_s
        self.levelled = levelled

    def on_start(self, user: "LLMUser") -> None:
        gevent.sleep(random.uniform(0.0, self.jitter_s))  # first requests spread, not one burst

    def step(self, user: "ScenarioUser") -> None:
        now = clock.now()
        cell = self.cells.cell_at(now)
        if cell is None or (self.levelled and user.stream >= cell.concurrency):
            gevent.sleep(max(min(self.cells.next_change(now) - now, 0.5), 0.01))
            return  # the run is over, or this stream's level has not begun
        job = user.scenario.next(user.stream)
        record = user.send(user.body_of(job), cell.label(job, user.stream, closed_loop=True))
        user.scenario.observe(job, record.to_dict())
        if record.error:
            gevent.sleep(ERROR_PAUSE_S)  # a failing server is not hammered in a tight loop


def free_running_cells(mode: "TimedMode", profile: "Profile", users: int, mix: Scenario) -> list[Cell]:
    """The cells of a mode with a fixed timeline, in the order they run: the warm-up, then the
    mode's measured cells; in an A/B run each of them once per target, alternating."""
    load = profile.load
    cells = with_warmup(mode.cells(load, users, mix), mode.name, getattr(load, "warmup_s", 0.0))
    return alternate([[replace(cell, target=label) for cell in cells] for label in target_labels(profile)])


class TimedMode(LoadMode):
    """A mode whose cells follow each other on a fixed timeline (closed, ladder, open, trace):
    a subclass says which `cells` it measures; its users are its scenarios' streams unless it
    overrides `begin` and `user_kind`."""

    levelled = False  # a cell's concurrency caps its streams (a user above the level idles)

    def cells(self, load: Any, users: int, mix: Scenario) -> list[Cell]:
        raise NotImplementedError

    def mix(self, profile: "Profile", config: "RunConfig | None" = None) -> Scenario:
        """What its requests draw from: the profile's scenarios by weight."""
        return Mix(build_scenarios(profile), profile.seed)

    def timeline(self, profile: "Profile", users: int, started_at: float, mix: Scenario) -> Timeline:
        return Timeline(tuple(free_running_cells(self, profile, users, mix)), started_at)

    def driver(self, profile: "Profile", users: int, started_at: float, run: Coordination) -> Driver:
        mix = self.mix(profile)
        return TimedDriver(run, users, self.timeline(profile, users, started_at, mix), mix.cache == COLD)

    def begin(self, config: "RunConfig", share: tuple[int, int]) -> ModeState:
        profile = config.profile
        timeline = self.timeline(profile, config.users, config.started_at, self.mix(profile, config))
        return ScenarioStreams(timeline, getattr(profile.load, "jitter_s", 0.0), self.levelled)
