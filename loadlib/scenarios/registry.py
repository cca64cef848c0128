"""The one registry of scenario kinds: kind -> its profile table's schema and the factory building
its scenarios (a new kind is one module with its scenario, schema and `ScenarioKind`, plus one
line here)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadlib.scenarios.agent_trace import AGENT_TRACE
from loadlib.scenarios.base import request_params
from loadlib.scenarios.dataset import DATASET
from loadlib.scenarios.issues import DISTINCT_ISSUES
from loadlib.scenarios.longcontext import LONG_CONTEXT
from loadlib.scenarios.multiturn import MULTI_TURN
from loadlib.scenarios.prompts import PROTOCOL
from loadlib.scenarios.radix import RADIX_HIT
from loadlib.scenarios.spec import ScenarioKind, Weighted
from loadlib.scenarios.synthetic import SYNTHETIC
from loadlib.scenarios.toolcall import TOOL_CALL
from loadlib.scenarios.vision import VISION

if TYPE_CHECKING:
    from loadlib.profiles import Profile

KINDS: dict[str, ScenarioKind] = {kind.name: kind for kind in (
    PROTOCOL, RADIX_HIT, DISTINCT_ISSUES, LONG_CONTEXT, MULTI_TURN, TOOL_CALL, VISION, DATASET, SYNTHETIC,
    AGENT_TRACE)}


def build_scenarios(profile: Profile, only: str | None = None) -> Weighted:
    """The profile's scenarios with their weights, in the file's order; `only` keeps the one of
    that name."""
    out: Weighted = []
    for name, spec in profile.scenarios.items():
        if only is None or name == only:
            out += KINDS[spec.kind].build(spec, name, profile.seed, request_params(spec.max_tokens, spec.thinking))
    return out
