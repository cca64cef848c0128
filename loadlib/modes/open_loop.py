"""Load mode `open`: arrivals at a fixed rate (evenly spaced, or a Poisson process), sent whether
or not earlier requests have ended. Every process draws the same seeded schedule and sends its
share of it (arrival i goes to process i mod processes); an arrival with no free user waits on
the client, and the wait is recorded apart as `queue_s`."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import NonNegativeFloat, PositiveFloat

from loadlib.modes.driver import LoadMode
from loadlib.modes.timeline import timeline_driver
from loadlib.scenarios import Cell, Scenario
from loadlib.scenarios.base import level_cell_name
from loadlib.scenarios.spec import Strict


class OpenLoad(Strict):
    mode: Literal["open"]
    rate_rps: PositiveFloat
    arrival: Literal["constant", "poisson"] = "constant"
    duration_s: PositiveFloat
    warmup_s: NonNegativeFloat = 0.0


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


def open_cells(load: OpenLoad, users: int, mix: Scenario) -> list[Cell]:
    return [Cell(level_cell_name(load.mode, rate_rps=load.rate_rps), load.mode, mix, users,
                 duration_s=load.duration_s)]


OPEN = LoadMode(OpenLoad, timeline_driver, cells=open_cells, sends_arrivals=lambda load: True,
                fixed_streams="arrivals follow the profile's rate, not a number of streams")
