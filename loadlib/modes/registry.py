"""The one registry of load modes: mode name -> `LoadMode` (a new mode is one module with its
schema and its `LoadMode`, plus one line here)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadlib.modes.base import LoadMode
from loadlib.modes.closed import CLOSED
from loadlib.modes.ladder import LADDER
from loadlib.modes.open_loop import OPEN
from loadlib.modes.own_users import OWN_USERS
from loadlib.modes.rounds import ROUNDS
from loadlib.modes.search_driver import SEARCH
from loadlib.modes.sessions import SESSIONS
from loadlib.modes.trace import TRACE

if TYPE_CHECKING:
    from loadlib.profiles import Profile

MODES: dict[str, LoadMode] = {mode.name: mode for mode in (ROUNDS, CLOSED, OPEN, LADDER, SEARCH, TRACE, SESSIONS)}


def mode_of(profile: Profile | None) -> LoadMode:
    """The mode a profile asks for, played once per server of its `[server]` sweep if it has one;
    without a profile, the locustfile's own users."""
    if profile is None:
        return OWN_USERS
    mode = MODES[profile.load.mode]
    if profile.server is not None:
        from loadlib.sweep.play import Sweep  # the sweep's launcher: only the coordinator plays one

        return Sweep(mode)
    return mode


def mode_named(name: str) -> LoadMode:
    """The mode a run's configuration names: a registry key, or the locustfile's own users."""
    return OWN_USERS if name == OWN_USERS.name else MODES[name]
