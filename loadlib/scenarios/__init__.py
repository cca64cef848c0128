"""The scenario library: what to ask the server, with the data shipped in `loadlib/data/`.

`protocol` (the thread's prompts), `radix-hit`, `distinct-issues`, `long-context`, `multi-turn`,
`tool-call` and `vision`; `Mix` weighs several for the free-running load modes.
"""

from loadlib.scenarios.base import ANY, COLD, WARM, Cell, Job, Scenario, Send, request_params
from loadlib.scenarios.issues import DistinctIssues
from loadlib.scenarios.longcontext import Calibration, Filler, LongContext
from loadlib.scenarios.mix import Mix
from loadlib.scenarios.multiturn import MultiTurn
from loadlib.scenarios.prompts import PromptSet, ProtocolScenario
from loadlib.scenarios.radix import RadixHit
from loadlib.scenarios.toolcall import ToolCall
from loadlib.scenarios.vision import Vision

__all__ = ["ANY", "COLD", "WARM", "Calibration", "Cell", "DistinctIssues", "Filler", "Job", "LongContext",
           "Mix", "MultiTurn", "PromptSet", "ProtocolScenario", "RadixHit", "Scenario", "Send", "ToolCall",
           "Vision", "request_params"]
