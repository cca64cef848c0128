"""What every load mode's driver shares: it runs where the run is coordinated (Locust's master,
or the local runner) and never sends requests itself.

`Driver` turns a scenario's jobs into `Assignment`s for the Locust users (on this process or on
workers), primes and calibrates before a cell, flushes the prefix cache before a cold round,
matches records back to what was sent, and (`drain`) waits for the requests in flight to end.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, get_args

import gevent
from gevent.event import Event

from loadlib.scenarios import ANY, Cell, Job, Scenario
from loadlib.wire.client import RequestTag

if TYPE_CHECKING:
    from locust.event import EventHook

    from loadlib.modes.search_driver import SearchHooks
    from loadlib.profiles import Profile

log = logging.getLogger(__name__)

USERS_WAIT_S = 120.0  # how long a cell waits for its users to be spawned before going on


@dataclass(slots=True)
class Assignment:
    """One request, as sent to the user that will run it."""

    request_id: str
    start_at: float  # wall clock; every stream of a round shares it
    body: dict[str, Any]
    tag: RequestTag
    cache_intended: str = ANY
    measured: bool = True
    turn: int | None = None

    def to_message(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "start_at": self.start_at, "body": self.body,
                "tag": asdict(self.tag), "cache_intended": self.cache_intended,
                "measured": self.measured, "turn": self.turn}

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> "Assignment":
        return cls(data["request_id"], data["start_at"], data["body"], RequestTag(**data["tag"]),
                   data["cache_intended"], data["measured"], data["turn"])


BodyBuilder = Callable[[Job], dict[str, Any]]  # a job -> its request body


class Driver:
    """Plays a load mode from the coordinating process; subclasses implement `play`.

    `on_record` is fed every finished request's record; `users_wanted` is what the load shape
    should spawn; `finished` is set when the mode is done.
    """

    def __init__(self, build_body: BodyBuilder, dispatch: Callable[[list[Assignment]], None],
                 capacity: Callable[[], int], users: int, flush: Callable[[], str] | None = None,
                 lead_time_s: float = 0.05, request_timeout_s: float = 900.0,
                 cell_events: EventHook | None = None) -> None:
        self.build_body = build_body
        self.dispatch = dispatch
        self.capacity = capacity
        self.users_wanted = users
        self.flush = flush
        self.lead_time_s = lead_time_s
        self.request_timeout_s = request_timeout_s
        if cell_events is None:  # imported here: importing Locust patches the process, which the
            from loadlib.hooks import events  # post-processor (importing the search's judging) must not

            cell_events = events.cell
        self.cell_events = cell_events  # fired with cell=, phase="start"|"end"
        self.finished = Event()
        self.phase: dict[str, Any] = {}
        self.flushes: Counter[str] = Counter()  # outcome -> count, for the manifest
        self._callbacks: dict[str, Callable[[dict[str, Any]], None]] = {}

    def run(self) -> None:
        """Plays the mode; sets `finished` at the end, however it ends."""
        try:
            self.play()
        finally:
            self.phase = {"state": "finished"}
            self.finished.set()

    def play(self) -> None:
        raise NotImplementedError

    def on_record(self, record: dict[str, Any]) -> None:
        callback = self._callbacks.pop(record["request_id"], None)
        if callback is not None:
            callback(record)

    @property
    def in_flight(self) -> int:
        return len(self._callbacks)

    # --- for subclasses -----------------------------------------------------------------------

    def assign(self, job: Job, cell: Cell, start_at: float, slot: int, round_index: int = 0,
               measured: bool = True, then: Callable[[dict[str, Any]], None] | None = None) -> Assignment:
        """An assignment for `job` in `cell`; `then(record)` runs when its record comes back."""
        tag = RequestTag(scenario=job.scenario, cell=cell.name, concurrency=cell.concurrency,
                         case=cell.case, round=round_index, slot=slot)
        assignment = Assignment(uuid.uuid4().hex, start_at, self.build_body(job), tag, job.cache,
                                measured, job.turn)

        def done(record: dict[str, Any]) -> None:
            if measured:
                cell.scenario.observe(job, record)
            if then is not None:
                then(record)

        self._callbacks[assignment.request_id] = done
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
        self.dispatch(assignments)
        if not done.wait(timeout=self.request_timeout_s + 60):
            log.warning("%s: %d request(s) never reported back; going on", label,
                        len(assignments) - len(records))
        return [records.get(a.request_id, {}) for a in assignments]

    def prepare(self, scenario: Scenario) -> None:
        """The scenario's priming and calibration, as unmeasured requests one at a time."""
        def send(jobs: list[Job], purpose: str) -> list[dict[str, Any]]:
            cell = Cell(purpose, purpose, scenario, 1)
            return [self.play_batch([self.assign(job, cell, time.time(), 0, measured=False)], purpose)[0]
                    for job in jobs]
        scenario.prepare(send)

    def flush_cache(self) -> None:
        if self.flush is None:
            return
        outcome = self.flush()
        if outcome not in self.flushes and outcome != "flushed":
            log.warning("flush_cache: %s; cold requests rely on unique prompts only", outcome)
        self.flushes[outcome] += 1

    def wait_for_users(self, n: int) -> None:
        waited = 0.0
        while self.capacity() < n and waited < USERS_WAIT_S:
            if waited and waited % 10 < 0.1:
                log.info("waiting for %d users (have %d)", n, self.capacity())
            gevent.sleep(0.1)
            waited += 0.1
        if self.capacity() < n:
            log.warning("only %d of %d users after %.0f s; going on", self.capacity(), n, USERS_WAIT_S)


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


@dataclass(frozen=True)
class DriverInputs:
    """What a mode's driver factory gets from the session: the profile, `users` (-u), when the
    run starts (wall clock), the count of requests in flight, the search's hooks (the search
    mode only) and `common`, the `Driver` arguments (build_body, dispatch, capacity, flush, ...)."""

    mode: LoadMode
    profile: Profile
    users: int
    started_at: float
    streams_in_flight: Callable[[], int]
    search: SearchHooks | None
    common: dict[str, Any]


def all_users(load: Any, users: int) -> int:
    """The users a mode spawns before its first cell: all of them, unless the mode says otherwise."""
    return users


@dataclass(frozen=True)
class LoadMode:
    """A load mode, as `loadlib.modes.MODES` lists it: its `[load]` table's schema (whose `mode`
    literal names it), the factory of its coordinator's driver, and what other code asks of it.

    `cells(load, users, mix)`: the measured cells of a mode with a fixed timeline (None: none);
    `first_users(load, users)`: the users spawned before its first cell; `sends_arrivals(load)`:
    requests come from an arrival schedule (open loop), not from users as fast as they go;
    `levelled`: a cell's concurrency caps its streams (a user above the level idles);
    `fixed_streams`: why the web UI's Edit cannot change its streams (empty: Edit changes them).
    """

    schema: type
    make_driver: Callable[[DriverInputs], Driver]
    free_running: bool = True
    cells: Callable[[Any, int, Scenario], list[Cell]] | None = None
    first_users: Callable[[Any, int], int] = all_users
    sends_arrivals: Callable[[Any], bool] = lambda load: False
    levelled: bool = False
    fixed_streams: str = ""

    @property
    def name(self) -> str:
        return get_args(self.schema.model_fields["mode"].annotation)[0]
