"""What the modes that send arrivals share (open, trace, a rate search): free users that send
each arrival of this process's share of the schedule at its time.

Every process draws the whole seeded schedule (times and scenarios) and keeps arrivals i = its
index mod processes, so together they send exactly the profile's schedule. A feeder greenlet
puts each arrival in the process's queue when it is due; a free user takes it and sends it. An
arrival with no free user waits on the client, and that wait is its record's `queue_s`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

import gevent
from gevent.queue import Queue

from loadlib import clock
from loadlib.modes.base import ModeState
from loadlib.scenarios import Cell, Mix, Scenario

if TYPE_CHECKING:
    from loadlib.run.users import LLMUser


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request due at `at` (wall clock) in `cell`: the next job of `scenario`, or the job it
    makes for a recorded `request` (a trace's line)."""

    at: float
    cell: Cell
    scenario: Any
    stream: int
    request: Any = None


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


class ArrivalSlots(ModeState):
    """The users' half: this process's queue of due arrivals, fed by `feed_*` greenlets."""

    def __init__(self, mix: Scenario, users: int, share: tuple[int, int]) -> None:
        self.mix = mix
        self.users = users
        self.share = share
        self.queue: Queue = Queue()

    def on_start(self, user: "LLMUser") -> None:
        user.prepared(ArrivalSlots, lambda: self.mix)  # the schedule's scenarios, primed once per process

    def step(self, user: "LLMUser") -> None:
        arrival: Arrival | None = self.queue.get()
        if arrival is None:  # the schedule is over
            gevent.sleep(1.0)
            return
        job = arrival.scenario.next(arrival.stream) if arrival.request is None else \
            arrival.scenario.job_for(arrival.request)
        record = user.send(user.body_of(job), arrival.cell.label(job, arrival.stream, scheduled_at=arrival.at))
        arrival.scenario.observe(job, record.to_dict())

    def mine(self, number: int) -> bool:
        index, count = self.share
        return number % count == index

    def put_when_due(self, arrivals: Iterable[Arrival]) -> None:
        for arrival in arrivals:
            gevent.sleep(max(arrival.at - clock.now(), 0.0))
            self.queue.put(arrival)

    def close(self) -> None:
        """The schedule is over: every free user is told so."""
        for _ in range(max(self.users, 1)):
            self.queue.put(None)

    def feed_rate(self, start: float, end: float, rate_rps: float, arrival: str, times: random.Random,
                  picks: random.Random, cell_at: Callable[[float], Cell]) -> None:
        """This process's share of the arrivals from `start` to `end` (wall clock) at `rate_rps`,
        each drawing its scenario from the mix by weight."""
        members = self.mix if isinstance(self.mix, Mix) else Mix([(self.mix, 1.0)])

        def due() -> Iterable[Arrival]:
            for number, offset in enumerate(arrival_offsets(rate_rps, arrival, end - start, times)):
                scenario = picks.choices(members.members, members.weights)[0]
                if self.mine(number):
                    yield Arrival(start + offset, cell_at(start + offset), scenario, number % self.users)
        self.put_when_due(due())
