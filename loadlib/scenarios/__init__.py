"""The scenario library: what to ask the server, with the data shipped in `loadlib/data/`.

`KINDS` is the one registry of scenario kinds: kind -> its profile table's schema and the
factory building its scenarios (a new kind is one module with its scenario, schema and
`ScenarioKind`, plus one line here). `protocol` (the thread's prompts), `radix-hit`,
`distinct-issues`, `long-context`, `multi-turn`, `tool-call` and `vision`; the user's own prompts
(`dataset`) and lengths from distributions (`synthetic`); `Mix` weighs several for the
free-running load modes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadlib.scenarios.base import ANY, COLD, WARM, Cell, Job, Scenario, Send, request_params
from loadlib.scenarios.dataset import DATASET, Dataset, DatasetError, dataset_scenario, load_dataset
from loadlib.scenarios.issues import DISTINCT_ISSUES, DistinctIssues
from loadlib.scenarios.longcontext import LONG_CONTEXT, Calibration, Filler, LongContext
from loadlib.scenarios.mix import Mix
from loadlib.scenarios.multiturn import MULTI_TURN, MultiTurn
from loadlib.scenarios.prompts import PROTOCOL, PromptSet, ProtocolScenario
from loadlib.scenarios.radix import RADIX_HIT, RadixHit
from loadlib.scenarios.spec import ScenarioKind, ScenarioSpec, Weighted
from loadlib.scenarios.synthetic import SYNTHETIC, Lengths, Synthetic
from loadlib.scenarios.toolcall import TOOL_CALL, ToolCall
from loadlib.scenarios.vision import VISION, Vision

if TYPE_CHECKING:
    from loadlib.profiles import Profile

KINDS: dict[str, ScenarioKind] = {kind.name: kind for kind in (
    PROTOCOL, RADIX_HIT, DISTINCT_ISSUES, LONG_CONTEXT, MULTI_TURN, TOOL_CALL, VISION, DATASET, SYNTHETIC)}


def build_scenarios(profile: Profile, only: str | None = None) -> Weighted:
    """The profile's scenarios with their weights, in the file's order; `only` keeps the one of
    that name."""
    out: Weighted = []
    for name, spec in profile.scenarios.items():
        if only is None or name == only:
            out += KINDS[spec.kind].build(spec, name, profile.seed, request_params(spec.max_tokens, spec.thinking))
    return out


__all__ = ["ANY", "COLD", "DATASET", "DISTINCT_ISSUES", "KINDS", "LONG_CONTEXT", "MULTI_TURN", "PROTOCOL",
           "RADIX_HIT", "SYNTHETIC", "TOOL_CALL", "VISION", "WARM", "Calibration", "Cell", "Dataset", "DatasetError", "DistinctIssues", "Filler",
           "Job", "Lengths", "LongContext", "Mix", "MultiTurn", "PromptSet", "ProtocolScenario", "RadixHit", "Scenario",
           "ScenarioKind", "ScenarioSpec", "Send", "Synthetic", "ToolCall", "Vision", "Weighted", "build_scenarios",
           "dataset_scenario", "load_dataset", "request_params"]
