"""Load mode `closed`: `-u` streams, each Locust user sending its next request as soon as its
last one ended, for `duration_s`; their first requests start at jittered moments, not in one burst."""

from __future__ import annotations

from typing import Literal

from pydantic import NonNegativeFloat, PositiveFloat

from loadlib.modes.timeline import TimedMode
from loadlib.scenarios import Cell, Scenario
from loadlib.scenarios.base import level_cell_name
from loadlib.scenarios.spec import Strict


class ClosedLoad(Strict):
    mode: Literal["closed"]
    duration_s: PositiveFloat
    warmup_s: NonNegativeFloat = 0.0
    jitter_s: NonNegativeFloat = 1.0  # first requests start spread over this many seconds


class Closed(TimedMode):
    schema = ClosedLoad

    def cells(self, load: ClosedLoad, users: int, mix: Scenario) -> list[Cell]:
        return [Cell(level_cell_name(load.mode), load.mode, mix, users, duration_s=load.duration_s)]


CLOSED = Closed()
