"""The load shape of the protocol's locustfile: Locust's own `LoadTestShape`, reading `-u`, `-r`
and `-t` as Locust documents them (`use_common_options`)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Protocol

from locust.shape import LoadTestShape

if TYPE_CHECKING:
    from loadlib.modes import Driver

log = logging.getLogger("uni-bench")


class StreamsWanted:
    """The web UI's Edit of a closed run: the streams it asked for (`edited`, None: none asked)
    and the spawn rate, each edit noted in the manifest by the session's `note`."""

    def __init__(self, opts: Any, note: Callable[[str, Any], None]) -> None:
        self.opts = opts
        self.note = note
        self.edited: int | None = None
        self.edits: list[dict[str, Any]] = []
        # Locust sets a headless run's spawn rate to 1 after this, where -r was not given: only a rate
        # given by now, by the web UI's start form (which writes its Ramp up into the options) or by
        # an Edit is one the user asked for
        self.rate_given = opts.spawn_rate is not None or not getattr(opts, "headless", True)

    def reset(self) -> None:
        """A new test: no edit yet."""
        self.edited, self.edits = None, []

    def edit(self, users: int, spawn_rate: float | None) -> None:
        """The web UI's Edit of a closed run: the load shape spawns or stops users to `users`."""
        self.edited = users
        if spawn_rate is not None:
            self.opts.spawn_rate = spawn_rate
            self.rate_given = True
        self.edits.append({"at": time.time(), "users": users})
        self.note("edits", self.edits)
        log.info("Edit: the closed loop now runs %d streams", users)

    def rate(self, users: int) -> float:
        """Users started per second as the options stand: `-r`, the web UI start form's Ramp up or
        its Edit (Locust and `edit` keep each in the options); without any, all `users` at once."""
        given = self.opts.spawn_rate if self.rate_given else None
        return given or float(max(users, 1))  # Locust wants a rate > 0


class ShapedRun(Protocol):
    """What the load shape reads of the run's session at each tick (`loadlib.run.session.RunSession`)."""

    driver: Driver | None
    summarized: bool  # the test's summary is written: it is over
    cut_short: str | None  # why the test ends early (the shape ends it at its next tick); set here for -t
    streams: StreamsWanted

    def users_wanted(self) -> int: ...


class ProtocolShape(LoadTestShape):
    """Spawns the users the load mode wants (all `-u`; the ladder's current level) at `-r` users
    per second, or the web UI form's Ramp up (all at once without either), ends the test at `-t`,
    and when the mode is done."""

    use_common_options = True

    def tick(self) -> tuple[int, float] | None:
        from loadlib.run.wiring import session_of  # the wiring imports the session, which imports this

        environment = self.runner.environment
        session: ShapedRun | None = session_of(environment)
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
        users = session.users_wanted()
        return users, session.streams.rate(users)
