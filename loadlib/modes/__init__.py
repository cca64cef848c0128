"""Load modes: how requests are scheduled.

`MODES` is the one registry: mode name -> `LoadMode` (its `[load]` table's schema, its driver's
factory, and what the users and the session ask of it). A new mode is one module with its
schema, driver and `LoadMode`, plus one line here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from loadlib.modes.closed import CLOSED
from loadlib.modes.driver import Assignment, Driver, DriverInputs, LoadMode
from loadlib.modes.ladder import LADDER
from loadlib.modes.open_loop import OPEN
from loadlib.modes.rounds import ROUNDS
from loadlib.modes.search_driver import SEARCH, SearchHooks
from loadlib.modes.trace import TRACE

if TYPE_CHECKING:
    from loadlib.profiles import Profile

MODES: dict[str, LoadMode] = {mode.name: mode for mode in (ROUNDS, CLOSED, OPEN, LADDER, SEARCH, TRACE)}


def make_driver(profile: Profile, users: int, started_at: float, streams_in_flight: Callable[[], int],
                search: SearchHooks | None = None, **common: Any) -> Driver:
    """The coordinator's driver of the profile's load mode for `users` Locust users, starting at
    `started_at` (wall clock); a free-running mode ends when `streams_in_flight()` drops to 0
    after its last cell; the search needs the session's `search` hooks; `common` are the
    `Driver` arguments (build_body, dispatch, capacity, flush, timings)."""
    mode = MODES[profile.load.mode]
    return mode.make_driver(DriverInputs(mode, profile, users, started_at, streams_in_flight, search, common))


def first_users(profile: Profile | None, users: int) -> int:
    """The users a load mode spawns before its first cell (all `users` without a profile)."""
    if profile is None:
        return users
    return MODES[profile.load.mode].first_users(profile.load, users)


__all__ = ["MODES", "Assignment", "Driver", "LoadMode", "SearchHooks", "first_users", "make_driver"]
