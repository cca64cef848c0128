"""Load mode `open`: arrivals at a fixed rate (evenly spaced, or a Poisson process), sent whether
or not earlier requests have ended (`loadlib.modes.arrivals`: each process sends its share of one
seeded schedule; an arrival with no free user waits on the client, recorded apart as `queue_s`)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Literal

import gevent
from pydantic import NonNegativeFloat, PositiveFloat

from loadlib.modes.arrivals import ArrivalSlots
from loadlib.modes.base import ModeState
from loadlib.modes.timeline import TimedMode
from loadlib.scenarios import Cell, Scenario
from loadlib.scenarios.base import level_cell_name
from loadlib.scenarios.spec import Strict

if TYPE_CHECKING:
    from loadlib.run.config import RunConfig


class OpenLoad(Strict):
    mode: Literal["open"]
    rate_rps: PositiveFloat
    arrival: Literal["constant", "poisson"] = "constant"
    duration_s: PositiveFloat
    warmup_s: NonNegativeFloat = 0.0


class Open(TimedMode):
    schema = OpenLoad
    fixed_streams = "arrivals follow the profile's rate, not a number of streams"

    def user_kind(self, load: Any) -> str:
        return "free_slots"

    def cells(self, load: OpenLoad, users: int, mix: Scenario) -> list[Cell]:
        return [Cell(level_cell_name(load.mode, rate_rps=load.rate_rps), load.mode, mix, users,
                     duration_s=load.duration_s)]

    def begin(self, config: "RunConfig", share: tuple[int, int]) -> ModeState:
        """Free users, and one greenlet feeding them the schedule over the whole timeline."""
        profile = config.profile
        mix = self.mix(profile)
        timeline = self.timeline(profile, config.users, config.started_at, mix)
        slots = ArrivalSlots(mix, config.users, share)

        def feed() -> None:
            load = profile.load
            slots.feed_rate(timeline.started_at, timeline.ends_at, load.rate_rps, load.arrival,
                            random.Random(profile.seed), random.Random(profile.seed + 1),
                            lambda at: timeline.cell_at(at) or timeline.cells[-1])
            slots.close()
        gevent.spawn(feed)
        return slots


OPEN = Open()
