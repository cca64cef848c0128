"""`tool-call`: an issue-triage bot that must answer with JSON tool calls (`tools` in the body).

Servers stream tool calls as `delta.tool_calls` fragments; the client counts them as output for
TTFT and chunks like content. The system prompt and tool list are one shared prefix, as in a
real bot; after them each request has its own ticket number and work item.
"""

from __future__ import annotations

from typing import Any, Literal

from loadlib.scenarios.base import Job, Scenario
from loadlib.scenarios.corpus import tools
from loadlib.scenarios.issues import ItemCycle
from loadlib.scenarios.spec import ScenarioKind, ScenarioSpec

SYSTEM = ("You are the triage bot of a busy open-source repository. For every report, investigate "
          "with the tools and act: search the code, read the relevant files, label the report and "
          "post one comment with your findings. Reply only with tool calls; arguments must be valid "
          "JSON that matches each tool's schema.")


class ToolCall(Scenario):
    kind = "tool-call"

    def __init__(self, tool_choice: str = "auto", seed: int = 0, params: dict[str, Any] | None = None,
                 cache: str | None = None, name: str | None = None) -> None:
        super().__init__(params, name)
        self.cache = cache or self.cache
        self.tool_choice = tool_choice
        self.cycle = ItemCycle(seed + 1)  # another order than distinct-issues with the same seed

    def next(self, stream: int) -> Job:
        item, ticket = self.cycle.take()
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"New report, ticket {ticket}:\n\n{item.text}"}]
        return self._job(self.name, messages, tools=list(tools()), tool_choice=self.tool_choice)


class ToolCallSpec(ScenarioSpec):
    kind: Literal["tool-call"]
    tool_choice: Literal["auto", "required"] = "auto"
    cache: Literal["cold", "any"] = "any"


TOOL_CALL = ScenarioKind(ToolCallSpec, lambda spec, name, seed, params: [
    (ToolCall(spec.tool_choice, seed, params, spec.cache, name), spec.weight)])
