"""The load shape of the protocol's locustfile: Locust's own `LoadTestShape`, reading `-u`, `-r`
and `-t` as Locust documents them (`use_common_options`)."""

from __future__ import annotations

import logging
import time
from typing import Any

from locust.shape import LoadTestShape

log = logging.getLogger("uni-bench")


class StreamsWanted:
    """How many users the load shape should have spawned, and at what rate: what the session's load
    mode wants now, unless the web UI's Edit of a closed run said otherwise (`edited`)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.edited: int | None = None

    @property
    def rate(self) -> float | None:
        """Users started per second as the options stand: `-r`, the web UI start form's Ramp up or
        its Edit (Locust and `edit` keep each in the options); None: all at once."""
        return self.session.opts.spawn_rate

    def edit(self, users: int, spawn_rate: float | None) -> None:
        """The web UI's Edit of a closed run: the load shape spawns or stops users to `users`."""
        self.edited = users
        if spawn_rate is not None:
            self.session.opts.spawn_rate = spawn_rate
        self.session.manifest.setdefault("edits", []).append({"at": time.time(), "users": users})
        log.info("Edit: the closed loop now runs %d streams", users)

    def now(self) -> int:
        """What the load mode wants spawned now; before it starts, what its first cell will want."""
        session = self.session
        if self.edited is not None:
            return self.edited
        if session.driver is not None and not session.driver.finished.is_set():
            return session.driver.users_wanted(time.time())
        users = session.opts.num_users or 1
        if session.profile is None:
            return users
        if session.profile.server is not None:
            return 0  # a sweep: no user before its first server is up
        return session.mode.first_users(session.profile.load, users)


class ProtocolShape(LoadTestShape):
    """Spawns the users the load mode wants (all `-u`; the ladder's current level) at `-r` users
    per second, or the web UI form's Ramp up (all at once without either), ends the test at `-t`,
    and when the mode is done."""

    use_common_options = True

    def tick(self) -> tuple[int, float] | None:
        from loadlib.run.wiring import session_of  # the wiring imports the session, which imports this

        environment = self.runner.environment
        session = session_of(environment)
        opts = environment.parsed_options
        if session is None:
            users = opts.num_users or 1
            return users, float(users)
        driver = session.driver
        # A driver from an earlier test (the web UI starts again) is finished and summarized.
        if driver is not None and driver.finished.is_set() and not session.summarized:
            return None
        if session.cut_short and not session.summarized:
            return None
        if opts.run_time and self.get_run_time() >= opts.run_time and not session.summarized:
            session.cut_short = f"-t/--run-time {opts.run_time:g} s reached"
            return None
        users = session.streams.now()
        return users, session.streams.rate or float(max(users, 1))  # all at once: Locust wants a rate > 0
