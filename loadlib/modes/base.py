"""What every load mode is made of: both halves of one strategy.

A `LoadMode` is one object in one module of this package. Its coordinator half is a `Driver`:
it runs where the run is coordinated (Locust's master, or the local runner), plans the cells and
their schedule, and never sends a request itself. Its users' half is a `ModeState`: made afresh
on every process that runs users at each test start, it is what those users do in their task
(take an assignment, read the cell on the clock, wait for an arrival). The run layer
(`loadlib.run`) asks the mode for both and never asks which mode it is.

The driver reaches the rest of the run through `Coordination`: sending assignments or a message
to the processes that run users, the users there, the prefix-cache flush, the run's records and
manifest. Local and distributed runs give the same `Coordination`.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Literal, Sequence, get_args

import gevent
from gevent.event import Event

from loadlib import clock
from loadlib.records import RequestLabel
from loadlib.scenarios import Cell, Job, Scenario

if TYPE_CHECKING:
    import pandas as pd
    from locust.event import EventHook

    from loadlib.figures.slo_resamples import Resample
    from loadlib.profiles import Profile
    from loadlib.run.config import RunConfig
    from loadlib.run.users import LLMUser

log = logging.getLogger("uni-bench")

USERS_WAIT_S = 120.0  # how long a cell waits for its users to be spawned before going on
UserKind = Literal["locustfile", "per_scenario", "free_slots"]


@dataclass(slots=True)
class Assignment:
    """One request, as sent to the user that will run it: its body, and its label, whose
    `scheduled_at` is when to send it (every stream of a round shares it)."""

    request_id: str
    body: dict[str, Any]
    label: RequestLabel

    @property
    def start_at(self) -> float:
        return self.label.scheduled_at or 0.0

    def to_message(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "body": self.body, "label": asdict(self.label)}

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> "Assignment":
        return cls(data["request_id"], data["body"], RequestLabel(**data["label"]))


@dataclass(frozen=True)
class Phase:
    """What the driver is doing now, for the web UI: starting, running a cell, or finished."""

    state: Literal["starting", "running", "finished"] = "starting"
    cell: str | None = None
    case: str | None = None
    concurrency: int | None = None
    round: int | None = None  # rounds: this round (from 0) of `rounds`
    rounds: int | None = None
    scenario: str | None = None  # a single-stream cell's prompt
    duration_s: float | None = None  # a free-running cell's time
    started_at: float | None = None
    note: str = ""  # the capacity search's bracket
    target: str = ""  # an A/B run's server now measured
    unplanned: bool = False  # no plan: every cell runs at once until the test is stopped (own users)

    def with_note(self, note: str) -> "Phase":
        return replace(self, note=note)


@dataclass(frozen=True)
class Coordination:
    """What a driver may ask of the run that plays it (the same locally and with workers).

    `dispatch` hands assignments to the users that run them; `announce` sends a message to the
    mode's state on every process that runs users; `capacity` is the users spawned now;
    `streams_in_flight` the requests being sent now, over every process; `flush` empties a
    server's prefix cache (by target label, "" for the run's one server); `records` reads the
    run's journal; `cell_frame` gives the records of ended cells (their names, and their target's
    label) as one records frame, as their ends read them back (`loadlib.run.cell_readings`, once
    for everyone who asks; shared: read, not changed); `note` writes a key of the manifest; `run_dir` is where the run keeps its files.
    `lead_time_s` is how far ahead a start time must be for every process to get it; `settle_s`
    how long 0 requests in flight must hold before the records of what was sent are all in.
    `serve` hands every process a new profile for the rest of the test (a sweep's next server, its
    one target) and returns the new clock's start; `retire` ends the watch of a target's server.
    `resample` draws a capacity level's resamples (by the workers, where the users run on some).
    """

    build_body: Callable[[Job], dict[str, Any]]
    dispatch: Callable[[list[Assignment]], None]
    announce: Callable[[dict[str, Any]], None]
    capacity: Callable[[], int]
    streams_in_flight: Callable[[], int]
    flush: Callable[[str], str] | None
    records: Callable[[], Iterable[dict[str, Any]]]
    cell_frame: Callable[[Sequence[str], str], pd.DataFrame]
    note: Callable[[str, Any], None]
    cell_events: "EventHook"
    resample: Resample
    lead_time_s: float = 0.05
    settle_s: float = 0.1
    request_timeout_s: float = 900.0
    serve: Callable[["Profile"], float] | None = None
    retire: Callable[[str], None] | None = None
    run_dir: Path | None = None


class Driver:
    """A load mode's coordinator half; subclasses implement `play` and say what to spawn.

    `plan` lists the cells known so far; `on_record` is fed every finished request's record when
    `wants_records` (the driver waits for what it assigned); `finished` is set when the mode is
    done, and `stopped` says why when it ended before its plan did.
    """

    wants_records: ClassVar[bool] = False

    def __init__(self, run: Coordination, users: int) -> None:
        self.run = run
        self.users = users  # -u
        self.plan: list[Cell] = []
        self.finished = Event()
        self.phase = Phase()
        self.stopped: str | None = None
        self.flushes: Counter[str] = Counter()  # outcome -> count, for the manifest
        self._callbacks: dict[str, Callable[[dict[str, Any]], None]] = {}

    def run_to_end(self) -> None:
        """Plays the mode; sets `finished` at the end, however it ends."""
        try:
            self.play()
        finally:
            self.phase = Phase("finished")
            self.finished.set()

    def play(self) -> None:
        raise NotImplementedError

    def users_wanted(self, now: float) -> int:
        """How many users the load shape should have spawned at `now`."""
        return self.users

    def close(self) -> None:
        """The test ended (finished, stopped or interrupted): release what the driver holds."""

    def plan_done(self) -> bool:
        """Whether the whole plan ran (the test may have been stopped before)."""
        return self.finished.is_set() and self.stopped is None

    def cache_flushes(self) -> Counter[str]:
        """The prefix-cache flushes this driver asked for, by outcome (for the manifest)."""
        return Counter(self.flushes)

    def on_record(self, record: dict[str, Any]) -> None:
        callback = self._callbacks.pop(record["request_id"], None)
        if callback is not None:
            callback(record)

    # --- for subclasses -----------------------------------------------------------------------

    def start_cell(self, cell: Cell, **phase: Any) -> None:
        self.phase = Phase("running", cell.name, cell.case, cell.concurrency, target=cell.target, **phase)
        self.run.cell_events.fire(cell=cell, phase="start")

    def end_cell(self, cell: Cell) -> None:
        self.run.cell_events.fire(cell=cell, phase="end")

    def assign(self, job: Job, cell: Cell, start_at: float, slot: int, round_index: int = 0) -> Assignment:
        """An assignment for `job` in `cell`, to be sent at `start_at`; its record goes back to
        the scenario when the cell is measured."""
        assignment = Assignment(uuid.uuid4().hex, self.run.build_body(job),
                                cell.label(job, slot, round_index, scheduled_at=start_at))
        self._callbacks[assignment.request_id] = (lambda record: cell.scenario.observe(job, record)) \
            if cell.measured else (lambda record: None)
        return assignment

    def play_batch(self, assignments: list[Assignment], label: str) -> list[dict[str, Any]]:
        """Dispatches `assignments` (made by `assign`) and waits for all their records, returned
        in assignment order ({} for a request that never reported back)."""
        records: dict[str, dict[str, Any]] = {}
        done = Event()

        def collect(record: dict[str, Any], then: Callable[[dict[str, Any]], None]) -> None:
            then(record)
            records[record["request_id"]] = record
            if len(records) == len(assignments):
                done.set()

        for assignment in assignments:
            then = self._callbacks[assignment.request_id]
            self._callbacks[assignment.request_id] = lambda record, then=then: collect(record, then)
        self.run.dispatch(assignments)
        if not done.wait(timeout=self.run.request_timeout_s + 60):
            log.warning("%s: %d request(s) never reported back; going on", label,
                        len(assignments) - len(records))
        return [records.get(a.request_id, {}) for a in assignments]

    def prepare(self, scenario: Scenario, target: str = "") -> None:
        """The scenario's priming and calibration, as unmeasured requests one at a time to `target`."""
        def send(jobs: list[Job], purpose: str) -> list[dict[str, Any]]:
            cell = Cell(purpose, purpose, scenario, 1, target=target, measured=False)
            return [self.play_batch([self.assign(job, cell, clock.now(), 0)], purpose)[0] for job in jobs]
        scenario.prepare(send)

    def flush_cache(self, target: str = "") -> None:
        """Empties the prefix cache of `target` (an A/B run's label; "": the run's one server)."""
        if self.run.flush is None:
            return
        outcome = self.run.flush(target)
        if outcome not in self.flushes and outcome != "flushed":
            log.warning("flush_cache: %s; cold requests rely on unique prompts only", outcome)
        self.flushes[outcome] += 1

    def wait_for_users(self, n: int) -> bool:
        """Waits (bounded: the load shape spawns them at `-r`) until `n` users are spawned; False
        when they never were."""
        waited = 0.0
        while self.run.capacity() < n and waited < USERS_WAIT_S:
            if waited and waited % 10 < 0.1:
                log.info("waiting for %d users (have %d)", n, self.run.capacity())
            gevent.sleep(0.1)
            waited += 0.1
        if self.run.capacity() < n:
            log.error("only %d of %d users after %.0f s: stopping", self.run.capacity(), n, USERS_WAIT_S)
            return False
        return True

    def drain(self, deadline: float) -> None:
        """The users send nothing new: wait (until `deadline`) for the requests they sent to end,
        and to stay ended for `settle_s` (a worker reports its requests in flight with each batch
        of records, so a count of 0 is believed once a batch sent after the last request came)."""
        quiet_since: float | None = None
        while clock.now() < deadline:
            if self.run.streams_in_flight() > 0:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = clock.now()
            if quiet_since is not None and clock.now() - quiet_since >= self.run.settle_s:
                return
            gevent.sleep(0.05)


class DriverOfDrivers(Driver):
    """A driver that plays other drivers, one at a time (a sweep's configurations, an A/B run's
    searches): what the run asks while one plays (its phase, the users it wants, its records, the
    end of the test) is that one's, `inner`. A subclass plays them and keeps what it adds."""

    def __init__(self, run: Coordination, users: int) -> None:
        super().__init__(run, users)
        self._inner: Driver | None = None
        self._played: list[Driver] = []

    @property
    def inner(self) -> Driver | None:
        """The driver playing now."""
        return self._inner

    @inner.setter
    def inner(self, driver: Driver | None) -> None:
        self._inner = driver
        if driver is not None and not any(driver is played for played in self._played):
            self._played.append(driver)

    def cache_flushes(self) -> Counter[str]:
        """Its own flushes and those of every driver it played (a sweep's configurations' modes)."""
        return sum((driver.cache_flushes() for driver in self._played), super().cache_flushes())

    @property
    def phase(self) -> Phase:
        """The inner driver's while both play; else this one's own (between drivers, at the end)."""
        inner = self.inner
        if inner is not None and not inner.finished.is_set() and not self.finished.is_set():
            return inner.phase
        return self._phase

    @phase.setter
    def phase(self, phase: Phase) -> None:
        self._phase = phase

    def users_wanted(self, now: float) -> int:
        """The inner driver's wish; none before the first plays."""
        return self.inner.users_wanted(now) if self.inner is not None else 0

    def on_record(self, record: dict[str, Any]) -> None:
        if self.inner is not None:
            self.inner.on_record(record)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


def target_labels(profile: "Profile") -> list[str]:
    """The labels of an A/B run's targets, in the profile's order; [""] for a run of one server."""
    return [target.label for target in profile.targets] or [""]


def alternate(plans: list[list[Cell]]) -> list[Cell]:
    """One plan of cells per target, merged cell by cell (A's first, B's first, A's second, ...),
    so that each cell of every target runs at nearly the same hour with the same client."""
    return [cell for cells in zip(*plans) for cell in cells]


def by_position(plan: list[Cell], targets: int) -> list[list[Cell]]:
    """An `alternate`d plan back in groups: the same cell of every target."""
    return [plan[start:start + targets] for start in range(0, len(plan), targets)]


class ModeState:
    """A load mode's users' half: one per process that runs users, made afresh at each test start
    (`LoadMode.begin`). Each user's task calls `step`; `on_start` runs once per user; `take` and
    `on_message` receive what the driver sends this process (assignments, announcements)."""

    labels_cells: ClassVar[bool] = True  # requests belong to the mode's cells (else: the locustfile's own)

    def on_start(self, user: "LLMUser") -> None:
        """A user of this test starts (after connecting)."""

    def step(self, user: "LLMUser") -> None:
        """One iteration of `user`'s task."""
        raise NotImplementedError

    def take(self, assignment: Assignment) -> None:
        raise TypeError(f"{type(self).__name__} takes no assignments")

    def on_message(self, data: dict[str, Any]) -> None:
        raise TypeError(f"{type(self).__name__} takes no messages")


class LoadMode:
    """A load mode, as `loadlib.modes.MODES` lists it, subclassed by each mode's module.

    `schema` is its `[load]` table (whose `mode` literal names it); `user_kind` says which Locust
    user classes it runs: the locustfile's own (`locustfile`), one per scenario of the profile with
    its weight (`per_scenario`), or free slots that send arrivals (`free_slots`); `fixed_streams`
    says why the web UI's Edit cannot change its streams (empty: Edit changes them);
    `starts_servers` that its driver starts the servers it measures and hands each to the run
    (`Coordination.serve`), so that the run has none to ask, configure or watch before.
    """

    schema: ClassVar[type]
    fixed_streams: ClassVar[str] = ""
    starts_servers: ClassVar[bool] = False

    @property
    def name(self) -> str:
        return get_args(self.schema.model_fields["mode"].annotation)[0]

    def user_kind(self, load: Any) -> UserKind:
        return "per_scenario"

    def first_users(self, load: Any, users: int) -> int:
        """The users spawned before the first cell (all of them unless the mode says otherwise)."""
        return users

    def driver(self, profile: "Profile", users: int, started_at: float, run: Coordination) -> Driver:
        """The coordinator half for `users` Locust users, its clock starting at `started_at`."""
        raise NotImplementedError

    def begin(self, config: "RunConfig", share: tuple[int, int]) -> ModeState:
        """The users' half on a process whose share of the work is `share` (index, processes)."""
        raise NotImplementedError

    def notes(self, profile: "Profile", context_tokens: int | None) -> dict[str, Any]:
        """Findings about the run's plan for its manifest, said once at its start (a text is
        also logged; another value is a figure the report reads)."""
        return {}
