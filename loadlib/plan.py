"""From a validated profile to its scenarios and the driver that plays its load mode."""

from __future__ import annotations

from typing import Any

from loadlib.modes import ClosedDriver, OpenDriver, ladder_levels
from loadlib.profiles import Profile
from loadlib.protocol import Conductor, Driver
from loadlib.scenarios import (Calibration, DistinctIssues, Filler, LongContext, Mix, MultiTurn,
                               ProtocolScenario, RadixHit, Scenario, ToolCall, Vision, request_params)


def build_scenarios(profile: Profile) -> list[tuple[Scenario, float]]:
    """The profile's scenarios with their weights, in the file's order (long-context: one per
    size, sharing the scenario's weight)."""
    seed = profile.seed
    out: list[tuple[Scenario, float]] = []
    for name, spec in profile.scenarios.items():
        params = request_params(spec.max_tokens, spec.thinking)
        if spec.kind == "protocol":
            out.append((ProtocolScenario(spec.single, params, spec.cache), spec.weight))
        elif spec.kind == "radix-hit":
            out.append((RadixHit(spec.prompt, spec.prime, params, name), spec.weight))
        elif spec.kind == "distinct-issues":
            out.append((DistinctIssues(seed, params, spec.cache, name), spec.weight))
        elif spec.kind == "long-context":
            calibration, filler = Calibration(), Filler()
            out += [(LongContext(size, calibration, filler, params, name), spec.weight / len(spec.sizes))
                    for size in spec.sizes]
        elif spec.kind == "multi-turn":
            out.append((MultiTurn(spec.turns, params, name), spec.weight))
        elif spec.kind == "tool-call":
            out.append((ToolCall(spec.tool_choice, seed, params, spec.cache, name), spec.weight))
        elif spec.kind == "vision":
            out.append((Vision(spec.image_px, params, spec.cache, name), spec.weight))
    return out


def make_driver(profile: Profile, users: int, **common: Any) -> Driver:
    """The driver of the profile's load mode for `users` Locust users; `common` are the
    `Driver` arguments (build_body, dispatch, capacity, flush, timings, cell_events)."""
    weighted = build_scenarios(profile)
    load = profile.load
    if load.mode == "rounds":
        concurrency = [n for n in load.concurrency if n <= users]
        plan = [cell for scenario, _weight in weighted for cell in scenario.round_cells(concurrency, load.rounds)]
        return Conductor(plan, users=users, **common)
    mix = Mix(weighted, profile.seed)
    if load.mode == "open":
        return OpenDriver(mix, load.rate_rps, load.arrival, load.duration_s, users, load.warmup_s,
                          profile.seed, **common)
    levels = ladder_levels(users, load.levels) if load.mode == "ladder" else [users]
    return ClosedDriver(mix, load.mode, levels, load.duration_s, load.warmup_s, load.jitter_s,
                        profile.seed, **common)
