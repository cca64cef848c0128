"""uni-locust: Locust users and load modes for streaming LLM servers.

    from loadlib import LLMUser          # your own locustfile's users
    from loadlib import RadixHitUser     # a shipped scenario as a user class
    from loadlib import events           # the tool's own events (`loadlib.hooks.LLMEvents`)

Importing a user class also wires the run into Locust (run directory, journal, end-of-run
summary, the tool's options). The names load lazily, so the simulator (`python -m loadlib.sim`)
and the post-processor import none of Locust.
"""

from __future__ import annotations

from typing import Any

_USER_CLASSES = ("LLMUser", "ModeUser", "ScenarioUser", "RadixHitUser", "DistinctIssuesUser", "LongContextUser",
                 "MultiTurnUser", "ToolCallUser", "VisionUser")

__all__ = [*_USER_CLASSES, "events"]


def __getattr__(name: str) -> Any:
    if name in _USER_CLASSES:
        from loadlib.run import users, wiring

        wiring.install()
        return getattr(users, name)
    if name == "events":
        from loadlib.hooks import events

        return events
    raise AttributeError(f"module 'loadlib' has no attribute {name!r}")
