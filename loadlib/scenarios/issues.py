"""`distinct-issues`: real work items, each used once per cycle through the shipped corpus.

Each request starts with its own ticket number, then the item, then the request to the bot, so
no two requests share a prefix beyond the chat template's framing: concurrent streams never hit
each other's cache, and neither do later cycles through the corpus (nor a later run against the
same server), as a bot that sees every issue once.
"""

from __future__ import annotations

import random
import uuid
from typing import Any, Literal

from loadlib.scenarios.base import Job, Scenario
from loadlib.scenarios.corpus import WorkItem, work_items
from loadlib.scenarios.spec import ScenarioKind, ScenarioSpec


class ItemCycle:
    """The shipped work items in a seeded order, handed out once per cycle, each time with a
    new ticket number."""

    def __init__(self, seed: int) -> None:
        self.items = list(work_items())
        random.Random(seed).shuffle(self.items)
        self.run = uuid.uuid4().hex[:8]  # a server's prefix cache outlives a run
        self._next = 0

    def take(self) -> tuple[WorkItem, str]:
        item = self.items[self._next % len(self.items)]
        ticket = f"{self.run}-{self._next + 1}"
        self._next += 1
        return item, ticket


def item_prompt(item: WorkItem, ticket: str | None = None) -> str:
    head = f"Ticket {ticket}\n" if ticket else ""
    return f"{head}{item.text}\n\n---\n{item.ask}"


class DistinctIssues(Scenario):
    kind = "distinct-issues"

    def __init__(self, seed: int = 0, params: dict[str, Any] | None = None, cache: str | None = None,
                 name: str | None = None) -> None:
        super().__init__(params, name)
        self.cache = cache or self.cache
        self.cycle = ItemCycle(seed)

    def next(self, stream: int) -> Job:
        return self._job(self.name, [{"role": "user", "content": item_prompt(*self.cycle.take())}])


class DistinctIssuesSpec(ScenarioSpec):
    kind: Literal["distinct-issues"]
    cache: Literal["cold", "any"] = "any"


DISTINCT_ISSUES = ScenarioKind(DistinctIssuesSpec, lambda spec, name, seed, params: [
    (DistinctIssues(seed, params, spec.cache, name), spec.weight)])
