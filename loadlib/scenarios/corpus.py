"""The shipped workload data in `loadlib/data/`: work items, conversations, tool definitions.

Work items are Markdown files `issues/NN-KIND-slug.md` (KIND: bug, feature, logs, perf,
question) written for this project; conversations are scripted chats in `conversations.toml`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import orjson

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ASKS = {  # what the bot is asked to do with an item of each kind (after the item, never before)
    "bug": "Find the root cause of this bug and propose a fix as a unified diff, with a regression test.",
    "feature": "Propose a design for this request and write the code for its core part.",
    "logs": "Explain from these logs what went wrong and in what order, and what to do next.",
    "perf": "Explain where the time goes and propose concrete changes, with the expected gain of each.",
    "question": "Answer this question precisely, with a short example.",
}


@dataclass(frozen=True, slots=True)
class WorkItem:
    id: str  # the file name without .md
    kind: str
    title: str
    text: str  # the whole Markdown text, title line included

    @property
    def ask(self) -> str:
        return ASKS[self.kind]


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    system: str | None
    turns: tuple[tuple[str, str], ...]  # (user, assistant) pairs; assistant replies are scripted


def _data():
    return resources.files("loadlib") / "data"


@lru_cache(maxsize=1)
def work_items() -> tuple[WorkItem, ...]:
    """Every shipped work item, in file-name order."""
    items = []
    for entry in sorted(_data().joinpath("issues").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".md"):
            continue
        stem = entry.name[:-3]
        kind = stem.split("-")[1]
        text = entry.read_text(encoding="utf-8").strip()
        title = text.splitlines()[0].lstrip("# ").strip()
        items.append(WorkItem(stem, kind, title, text))
    return tuple(items)


def work_item(item_id: str) -> WorkItem | None:
    return next((item for item in work_items() if item.id == item_id), None)


@lru_cache(maxsize=1)
def conversations() -> tuple[Conversation, ...]:
    data = tomllib.loads(_data().joinpath("conversations.toml").read_text(encoding="utf-8"))
    return tuple(Conversation(c["id"], c.get("system"), tuple((t["user"], t["assistant"]) for t in c["turn"]))
                 for c in data["conversation"])


@lru_cache(maxsize=1)
def tools() -> tuple[dict[str, Any], ...]:
    """OpenAI-style tool definitions of an issue-triage bot."""
    return tuple(orjson.loads(_data().joinpath("tools.json").read_bytes()))
