"""The protocol run: which cells, which rounds, and the conductor that starts each round together.

A round is N streams that start at the same wall-clock moment and ends when all N are done.
The conductor runs where the run is coordinated (Locust's master, or the local runner). It does
not send requests itself: it hands one `Assignment` per stream to Locust users (on this process
or on workers) with a common `start_at` a little in the future, then waits for all N records.
Scheduling by wall-clock time keeps the streams of a round together across processes.

`Driver` is what the conductor shares with the free-running load modes (`loadlib.modes.timed`):
turning a scenario's jobs into assignments, priming and calibration before a cell, flushing
the prefix cache before a cold round, and matching records back to what was sent.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Callable

import gevent
from gevent.event import Event
from locust.event import EventHook

from loadlib.wire.client import RequestTag
from loadlib.scenarios import ANY, COLD, Cell, Job, Scenario

log = logging.getLogger(__name__)

__all__ = ["Assignment", "Cell", "Conductor", "Driver"]

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
        self.cell_events = cell_events or EventHook()  # fired with cell=, phase="start"|"end"
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


class Conductor(Driver):
    """The rounds mode: plays every round of the plan in order."""

    def __init__(self, plan: list[Cell], build_body: BodyBuilder,
                 dispatch: Callable[[list[Assignment]], None], capacity: Callable[[], int],
                 users: int = 1, **kwargs: Any) -> None:
        super().__init__(build_body, dispatch, capacity, users, **kwargs)
        self.plan = plan

    def play(self) -> None:
        for cell in self.plan:
            self.wait_for_users(cell.concurrency)
            self.prepare(cell.scenario)
            self.cell_events.fire(cell=cell, phase="start")
            for index in range(cell.rounds):
                if cell.scenario.cache == COLD:
                    self.flush_cache()
                self._play_round(cell, index)
            self.cell_events.fire(cell=cell, phase="end")

    def _play_round(self, cell: Cell, index: int) -> None:
        start_at = time.time() + self.lead_time_s
        jobs = [cell.scenario.next(slot) for slot in range(cell.concurrency)]
        self.phase = {"state": "running", "cell": cell.name, "case": cell.case,
                      "concurrency": cell.concurrency, "round": index, "rounds": cell.rounds,
                      "scenario": jobs[0].scenario if cell.case == "single" else None}
        self.play_batch([self.assign(job, cell, start_at, slot, index) for slot, job in enumerate(jobs)],
                        f"{cell.name} round {index}")
