"""The scenario library: what to ask the server, with the data shipped in `loadlib/data/`.

`KINDS` (`registry.py`) is the one registry of scenario kinds: kind -> its profile table's schema
and the factory building its scenarios. `protocol` (the thread's prompts), `radix-hit`,
`distinct-issues`, `long-context`, `multi-turn`, `tool-call` and `vision`; the user's own prompts
(`dataset`) and lengths from distributions (`synthetic`); `Mix` weighs several for the
free-running load modes.

The names load on first use: the post-processor needs the cells' names, not every kind's schema
(pydantic) and shipped data.
"""

from __future__ import annotations

from loadlib.lazy import lazy_names

__all__, __getattr__ = lazy_names(__name__, {
    "agent_trace": ("AGENT_TRACE", "AgentTrace"),
    "base": ("ANY", "COLD", "WARM", "Cell", "Job", "Scenario", "Send", "request_params"),
    "dataset": ("DATASET", "Dataset", "DatasetError", "dataset_scenario", "load_dataset"),
    "issues": ("DISTINCT_ISSUES", "DistinctIssues"),
    "longcontext": ("LONG_CONTEXT", "Calibration", "Filler", "LongContext"),
    "mix": ("Mix",),
    "multiturn": ("MULTI_TURN", "MultiTurn"),
    "prompts": ("PROTOCOL", "PromptSet", "ProtocolScenario"),
    "radix": ("RADIX_HIT", "RadixHit"),
    "registry": ("KINDS", "build_scenarios"),
    "spec": ("ScenarioKind", "ScenarioSpec", "Weighted"),
    "synthetic": ("SYNTHETIC", "Lengths", "Synthetic"),
    "toolcall": ("TOOL_CALL", "ToolCall"),
    "vision": ("VISION", "Vision"),
})
