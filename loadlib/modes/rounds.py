"""Load mode `rounds`: the protocol's cells, round after round, each round's streams started together.

A round is N streams that start at the same wall-clock moment and ends when all N are done.
The conductor hands one `Assignment` per stream to the users with a common `start_at` a little
in the future, then waits for all N records: scheduling by wall-clock time keeps the streams of
a round together across processes.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Literal

from pydantic import Field, PositiveInt

from loadlib.modes.driver import Assignment, BodyBuilder, Driver, DriverInputs, LoadMode
from loadlib.scenarios import COLD, Cell, build_scenarios
from loadlib.scenarios.base import SINGLE
from loadlib.scenarios.spec import Strict

DEFAULT_ROUNDS = 3  # the thread's rounds per cell
DEFAULT_CONCURRENCY = (2, 4, 8)  # the thread's concurrent cells


class RoundsLoad(Strict):
    mode: Literal["rounds"] = "rounds"
    rounds: PositiveInt = DEFAULT_ROUNDS
    concurrency: list[PositiveInt] = Field(default_factory=lambda: list(DEFAULT_CONCURRENCY))


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
                      "scenario": jobs[0].scenario if cell.case == SINGLE else None}
        self.play_batch([self.assign(job, cell, start_at, slot, index) for slot, job in enumerate(jobs)],
                        f"{cell.name} round {index}")


def rounds_driver(run: DriverInputs) -> Conductor:
    """The conductor of every scenario's cells at the concurrencies up to `run.users`."""
    load = run.profile.load
    concurrency = [n for n in load.concurrency if n <= run.users]
    plan = [cell for scenario, _weight in build_scenarios(run.profile)
            for cell in scenario.round_cells(concurrency, load.rounds)]
    return Conductor(plan, users=run.users, **run.common)


ROUNDS = LoadMode(RoundsLoad, rounds_driver, free_running=False,
                  fixed_streams="each cell starts its N streams together, round after round")
