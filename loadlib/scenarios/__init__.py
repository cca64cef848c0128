"""The scenario library: what to ask the server, with the data shipped in `loadlib/data/`.

`protocol` (the thread's prompts), `radix-hit`, `distinct-issues`, `long-context`, `multi-turn`,
`tool-call` and `vision`; the user's own prompts (`dataset`) and lengths from distributions
(`synthetic`); `Mix` weighs several for the free-running load modes.
"""

from loadlib.scenarios.base import ANY, COLD, WARM, Cell, Job, Scenario, Send, request_params
from loadlib.scenarios.dataset import Dataset, DatasetError, dataset_scenario, load_dataset
from loadlib.scenarios.issues import DistinctIssues
from loadlib.scenarios.longcontext import Calibration, Filler, LongContext
from loadlib.scenarios.mix import Mix
from loadlib.scenarios.multiturn import MultiTurn
from loadlib.scenarios.prompts import PromptSet, ProtocolScenario
from loadlib.scenarios.radix import RadixHit
from loadlib.scenarios.synthetic import Lengths, Synthetic
from loadlib.scenarios.toolcall import ToolCall
from loadlib.scenarios.vision import Vision

__all__ = ["ANY", "COLD", "WARM", "Calibration", "Cell", "Dataset", "DatasetError", "DistinctIssues", "Filler", "Job",
           "Lengths", "LongContext", "Mix", "MultiTurn", "PromptSet", "ProtocolScenario", "RadixHit", "Scenario",
           "Send", "Synthetic", "ToolCall", "Vision", "dataset_scenario", "load_dataset", "request_params"]
