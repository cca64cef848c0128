"""From a validated profile to its scenarios and the driver that plays its load mode."""

from __future__ import annotations

from typing import Any, Callable

from loadlib.modes.timed import SearchDriver, SearchHooks, TimedDriver, Timeline, free_running_cells
from loadlib.profiles import Profile
from loadlib.modes.rounds import Conductor, Driver
from loadlib.scenarios import (Calibration, DistinctIssues, Filler, LongContext, Mix, MultiTurn,
                               ProtocolScenario, RadixHit, Scenario, Synthetic, ToolCall, Vision, dataset_scenario,
                               request_params)


def build_scenarios(profile: Profile, only: str | None = None) -> list[tuple[Scenario, float]]:
    """The profile's scenarios with their weights, in the file's order (long-context: one per
    size, sharing the scenario's weight); `only` keeps the one of that name."""
    seed = profile.seed
    out: list[tuple[Scenario, float]] = []
    for name, spec in profile.scenarios.items():
        if only is not None and name != only:
            continue
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
        elif spec.kind == "dataset":
            out.append((dataset_scenario(spec.dataset, spec.order, seed, spec.reply_length, params, name), spec.weight))
        elif spec.kind == "synthetic":
            out.append((Synthetic(spec.input_tokens, spec.output_tokens, spec.prefix_tokens, spec.prefix_groups, seed,
                                  params, name), spec.weight))
    return out


def make_driver(profile: Profile, users: int, started_at: float, streams_in_flight: Callable[[], int],
                search: SearchHooks | None = None, **common: Any) -> Driver:
    """The coordinator's driver of the profile's load mode for `users` Locust users: the rounds
    conductor, the timeline of a free-running mode starting at `started_at` (wall clock), which
    ends when `streams_in_flight()` drops to 0 after its last cell, or the capacity search from
    `started_at` (which needs the session's `search` hooks); `common` are the `Driver` arguments
    (build_body, dispatch, capacity, flush, timings)."""
    load = profile.load
    if load.mode == "rounds":
        concurrency = [n for n in load.concurrency if n <= users]
        plan = [cell for scenario, _weight in build_scenarios(profile)
                for cell in scenario.round_cells(concurrency, load.rounds)]
        return Conductor(plan, users=users, **common)
    mix = Mix(build_scenarios(profile), profile.seed)
    if load.mode == "search":
        assert search is not None, "the search mode needs the session's hooks"
        return SearchDriver(load, profile.slo, mix, users, started_at, streams_in_flight, search, **common)
    timeline = Timeline(tuple(free_running_cells(profile, users, mix)), started_at)
    return TimedDriver(timeline, streams_in_flight, **common)
