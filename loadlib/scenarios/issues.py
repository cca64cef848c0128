"""`distinct-issues`: real work items, each used once per cycle through the shipped corpus.

The item comes first and the request to the bot after it, so no two items share a prefix
beyond the chat template's framing: concurrent streams never hit each other's cache.
"""

from __future__ import annotations

import random
from typing import Any

from loadlib.scenarios.base import Job, Scenario
from loadlib.scenarios.corpus import WorkItem, work_items


class ItemCycle:
    """The shipped work items in a seeded order, handed out once per cycle."""

    def __init__(self, seed: int) -> None:
        self.items = list(work_items())
        random.Random(seed).shuffle(self.items)
        self._next = 0

    def take(self) -> WorkItem:
        item = self.items[self._next % len(self.items)]
        self._next += 1
        return item


def item_prompt(item: WorkItem) -> str:
    return f"{item.text}\n\n---\n{item.ask}"


class DistinctIssues(Scenario):
    kind = "distinct-issues"

    def __init__(self, seed: int = 0, params: dict[str, Any] | None = None, cache: str | None = None,
                 name: str | None = None) -> None:
        super().__init__(params, name)
        self.cache = cache or self.cache
        self.cycle = ItemCycle(seed)

    def next(self, stream: int) -> Job:
        return self._job(self.name, [{"role": "user", "content": item_prompt(self.cycle.take())}])
