"""A weighted mix of scenarios for the free-running modes (closed, open, ladder).

Draws are seeded, so a run's sequence of scenarios is reproducible.
"""

from __future__ import annotations

import random
from typing import Any

from loadlib.scenarios.base import ANY, COLD, Job, Scenario, Send


class Mix(Scenario):
    kind = "mix"

    def __init__(self, weighted: list[tuple[Scenario, float]], seed: int = 0) -> None:
        super().__init__()
        self.members = [scenario for scenario, _weight in weighted]
        self.weights = [weight for _scenario, weight in weighted]
        self.cache = COLD if any(s.cache == COLD for s in self.members) else ANY
        self._rng = random.Random(seed)

    def next(self, stream: int) -> Job:
        return self._rng.choices(self.members, self.weights)[0].next(stream)

    def prepare(self, send: Send) -> None:
        for scenario in self.members:
            scenario.prepare(send)

    def observe(self, job: Job, record: dict[str, Any]) -> None:
        for scenario in self.members:
            scenario.observe(job, record)
