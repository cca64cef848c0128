"""The protocol run: which cells, which rounds, and the conductor that starts each round together.

A round is N streams that start at the same wall-clock moment and ends when all N are done.
The conductor runs where the run is coordinated (Locust's master, or the local runner). It does
not send requests itself: it hands one `Assignment` per stream to Locust users (on this process
or on workers) with a common `start_at` a little in the future, then waits for all N records.
Scheduling by wall-clock time keeps the streams of a round together across processes.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable

import gevent
from gevent.event import Event
from locust.event import EventHook

from loadlib.client import ChatSettings, RequestTag, chat_body
from loadlib.prompts import PROTOCOL_PROMPTS, SAME_PROMPT, different_prompts

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Cell:
    """One measurement cell: `rounds` rounds of `len(prompts)` simultaneous streams."""

    name: str  # "single", "c2-same", "c4-different", ...
    case: str  # "single" | "same" | "different"
    prompts: tuple[str, ...]  # prompt names, one per stream
    rounds: int

    @property
    def concurrency(self) -> int:
        return len(self.prompts)


@dataclass(slots=True)
class Assignment:
    """One stream of one round, as sent to the user that will run it."""

    request_id: str
    start_at: float  # wall clock; every stream of a round shares it
    body: dict[str, Any]
    tag: RequestTag

    def to_message(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "start_at": self.start_at, "body": self.body,
                "tag": asdict(self.tag)}

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> "Assignment":
        return cls(data["request_id"], data["start_at"], data["body"], RequestTag(**data["tag"]))


def protocol_plan(scenarios: list[str], concurrency: list[int], rounds: int) -> list[Cell]:
    """The thread's order: single stream per scenario, then per N the same and different cells."""
    cells = [Cell("single", "single", (name,), rounds) for name in scenarios]
    for n in concurrency:
        cells.append(Cell(f"c{n}-same", "same", (SAME_PROMPT,) * n, rounds))
        cells.append(Cell(f"c{n}-different", "different", tuple(different_prompts(n)), rounds))
    return cells


BodyBuilder = Callable[[str], dict[str, Any]]  # prompt name -> request body


def prompt_body_builder(settings: ChatSettings) -> BodyBuilder:
    """Builds request bodies for the protocol's named prompts."""
    def build(prompt_name: str) -> dict[str, Any]:
        return chat_body(settings, [{"role": "user", "content": PROTOCOL_PROMPTS[prompt_name]}])
    return build


class Conductor:
    """Runs the plan round by round; `on_record` is fed every finished request's record."""

    def __init__(self, plan: list[Cell], build_body: BodyBuilder,
                 dispatch: Callable[[list[Assignment]], None], capacity: Callable[[], int],
                 lead_time_s: float = 0.05, round_timeout_s: float = 960.0,
                 cell_events: EventHook | None = None) -> None:
        self.plan = plan
        self.build_body = build_body
        self.dispatch = dispatch
        self.capacity = capacity
        self.lead_time_s = lead_time_s
        self.round_timeout_s = round_timeout_s
        self.cell_events = cell_events or EventHook()  # fired with cell=, phase="start"|"end"
        self.finished = Event()
        self.phase: dict[str, Any] = {}
        self._pending: set[str] = set()
        self._round_done = Event()

    def run(self) -> None:
        """Plays every round of the plan in order; sets `finished` at the end."""
        try:
            for cell in self.plan:
                self._wait_for_users(cell.concurrency)
                self.cell_events.fire(cell=cell, phase="start")
                for index in range(cell.rounds):
                    self._play_round(cell, index)
                self.cell_events.fire(cell=cell, phase="end")
        finally:
            self.phase = {"state": "finished"}
            self.finished.set()

    def on_record(self, request_id: str) -> None:
        self._pending.discard(request_id)
        if not self._pending:
            self._round_done.set()

    def _wait_for_users(self, n: int) -> None:
        waited = 0.0
        while self.capacity() < n:
            if waited and waited % 10 < 0.1:
                log.info("waiting for %d users (have %d)", n, self.capacity())
            gevent.sleep(0.1)
            waited += 0.1

    def _play_round(self, cell: Cell, index: int) -> None:
        start_at = time.time() + self.lead_time_s
        assignments = [
            Assignment(uuid.uuid4().hex, start_at, self.build_body(prompt),
                       RequestTag(scenario=prompt, cell=cell.name, concurrency=cell.concurrency,
                                  case=cell.case, round=index, slot=slot))
            for slot, prompt in enumerate(cell.prompts)
        ]
        self.phase = {"state": "running", "cell": cell.name, "case": cell.case,
                      "concurrency": cell.concurrency, "round": index, "rounds": cell.rounds,
                      "scenario": cell.prompts[0] if cell.case == "single" else None}
        self._pending = {a.request_id for a in assignments}
        self._round_done.clear()
        self.dispatch(assignments)
        if not self._round_done.wait(timeout=self.round_timeout_s):
            log.warning("%s round %d: %d stream(s) never reported back; going on",
                        cell.name, index, len(self._pending))
