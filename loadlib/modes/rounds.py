"""Load mode `rounds`: the protocol's cells, round after round, each round's streams started together.

A round is N streams that start at the same wall-clock moment and ends when all N are done.
The driver hands one `Assignment` per stream to the users with a common `start_at` a little in
the future, then waits for all N records: scheduling by wall-clock time keeps the streams of a
round together across processes. Each user (the locustfile's `ModeUser`s) takes the assignments
sent to its process, one at a time, and sends each at its start time.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import gevent
from gevent.queue import Empty, Queue
from pydantic import Field, PositiveInt

from loadlib import clock
from loadlib.modes.base import (Assignment, Coordination, Driver, LoadMode, ModeState, Phase, alternate, by_position,
                                target_labels)
from loadlib.scenarios import COLD, Cell, build_scenarios
from loadlib.scenarios.base import SINGLE
from loadlib.scenarios.spec import Strict

if TYPE_CHECKING:
    from loadlib.profiles import Profile
    from loadlib.run.config import RunConfig
    from loadlib.run.users import LLMUser

DEFAULT_ROUNDS = 3  # the thread's rounds per cell
DEFAULT_CONCURRENCY = (2, 4, 8)  # the thread's concurrent cells


class RoundsLoad(Strict):
    mode: Literal["rounds"] = "rounds"
    rounds: PositiveInt = DEFAULT_ROUNDS
    concurrency: list[PositiveInt] = Field(default_factory=lambda: list(DEFAULT_CONCURRENCY))


class RoundsDriver(Driver):
    """Plays every round of the plan in order; a cell whose users never came ends the run."""

    wants_records = True

    def __init__(self, run: Coordination, users: int, plan: list[Cell], targets: int = 1) -> None:
        super().__init__(run, users)
        self.plan = plan
        self.targets = targets  # an A/B run's plan has each cell once per target, side by side

    def play(self) -> None:
        for cells in by_position(self.plan, self.targets):
            cell = cells[0]
            if not self.wait_for_users(cell.concurrency):
                self.stopped = f"{cell.name} needs {cell.concurrency} users, {self.run.capacity()} were spawned"
                return
            for each in cells:
                self.prepare(each.scenario, each.target)
                self.start_cell(each, round=0, rounds=each.rounds)
            for index in range(cell.rounds):
                for each in cells:  # an A/B run: A's round, then B's, so both see the same hour
                    if each.scenario.cache == COLD:
                        self.flush_cache(each.target)
                    self._play_round(each, index)
            for each in cells:
                self.end_cell(each)

    def _play_round(self, cell: Cell, index: int) -> None:
        start_at = clock.now() + self.run.lead_time_s
        jobs = [cell.scenario.next(slot) for slot in range(cell.concurrency)]
        self.phase = Phase("running", cell.name, cell.case, cell.concurrency, index, cell.rounds,
                           jobs[0].scenario if cell.case == SINGLE else None, target=cell.target)
        self.play_batch([self.assign(job, cell, start_at, slot, index) for slot, job in enumerate(jobs)],
                        f"{cell.name} round {index}")


class RoundsState(ModeState):
    """This process's assignments, waiting for a free user."""

    def __init__(self) -> None:
        self.assignments: Queue = Queue()

    def take(self, assignment: Assignment) -> None:
        self.assignments.put(assignment)

    def step(self, user: "LLMUser") -> None:
        """Sends the next assignment at its start time (one taken after its start time waited for
        a free user: `queue_s`)."""
        try:  # bounded: a test's next configuration (a sweep) replaces this state
            assignment: Assignment = self.assignments.get(timeout=1.0)
        except Empty:
            return
        delay = assignment.start_at - clock.now()
        if delay > 0:
            gevent.sleep(delay)
        user.send(assignment.body, assignment.label, request_id=assignment.request_id, urgent=True)


class Rounds(LoadMode):
    schema = RoundsLoad
    fixed_streams = "each cell starts its N streams together, round after round"

    def user_kind(self, load: Any) -> str:
        return "locustfile"

    def driver(self, profile: "Profile", users: int, started_at: float, run: Coordination) -> Driver:
        """Every scenario's cells at the concurrencies up to `users`; in an A/B run each cell once
        per target, each target with scenarios of its own (the same prompts, primed on it)."""
        load = profile.load
        concurrency = [n for n in load.concurrency if n <= users]

        def plan(target: str) -> list[Cell]:
            return [replace(cell, target=target) for scenario, _weight in build_scenarios(profile)
                    for cell in scenario.round_cells(concurrency, load.rounds)]
        labels = target_labels(profile)
        return RoundsDriver(run, users, alternate([plan(label) for label in labels]), len(labels))

    def begin(self, config: "RunConfig", share: tuple[int, int]) -> ModeState:
        return RoundsState()


ROUNDS = Rounds()
