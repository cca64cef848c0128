"""Load mode `ladder`: the closed mode stepped through concurrency levels (1, 2, 4, ... up to `-u`),
the load shape spawning each level's users; every level is its own cell ("ladder-u4")."""

from __future__ import annotations

from typing import Literal

from pydantic import NonNegativeFloat, PositiveFloat, PositiveInt, field_validator

from loadlib.modes.timeline import TimedMode
from loadlib.scenarios import Cell, Scenario
from loadlib.scenarios.base import level_cell_name
from loadlib.scenarios.spec import Strict


class LadderLoad(Strict):
    mode: Literal["ladder"]
    duration_s: PositiveFloat  # per level
    levels: list[PositiveInt] | None = None  # default 1, 2, 4, ... up to -u
    warmup_s: NonNegativeFloat = 0.0
    jitter_s: NonNegativeFloat = 1.0

    @field_validator("levels")
    @classmethod
    def _rising(cls, levels: list[int] | None) -> list[int] | None:
        if levels is not None and (not levels or any(b <= a for a, b in zip(levels, levels[1:]))):
            raise ValueError("levels must be a non-empty rising list")
        return levels


def ladder_levels(top: int, levels: list[int] | None = None) -> list[int]:
    """The given levels up to `top`, or 1, 2, 4, ... below `top`, then `top` itself."""
    if levels:
        return [level for level in levels if level <= top] or [top]
    out, level = [], 1
    while level < top:
        out.append(level)
        level *= 2
    return out + [top]


class Ladder(TimedMode):
    schema = LadderLoad
    levelled = True
    fixed_streams = "the ladder steps its own levels; set `levels` in the profile"

    def cells(self, load: LadderLoad, users: int, mix: Scenario) -> list[Cell]:
        return [Cell(level_cell_name(load.mode, users=level), load.mode, mix, level, duration_s=load.duration_s)
                for level in ladder_levels(users, load.levels)]

    def first_users(self, load: LadderLoad, users: int) -> int:
        return ladder_levels(users, load.levels)[0]


LADDER = Ladder()
