"""The processes that run the users, as the coordinating process sees them: one interface, two
implementations. `LocalUsers` is this very process (Locust's local runner); `WorkerUsers`
(`loadlib.run.workers`) is Locust's workers, seen from its master. The run's lifecycle
(`loadlib.run.session`) and the load mode's driver talk to either the same way, and never ask
which one it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import gevent
import numpy as np
from locust.env import Environment

from loadlib.figures import live as live_figures
from loadlib.figures.slo_resamples import resampled_statistics
from loadlib.modes import Assignment
from loadlib.run.config import RunConfig
from loadlib.run.runtime import LIVE_S, ProcessRun


@dataclass(frozen=True)
class LostWorker:
    """A worker whose process ended during the test, and what that cost."""

    worker: str
    pid: int | None
    at: float  # wall clock, when the master saw it gone
    users: int  # users it ran
    requests_in_flight: int  # requests it was sending (their records died with it)
    exit: str | None  # "killed by signal 9", "exit code 1", or None when unknown

    def said(self) -> str:
        pid = f" (pid {self.pid})" if self.pid else ""
        how = f", {self.exit}" if self.exit else ""
        return (f"worker {self.worker}{pid} lost{how}: it ran {self.users} user{'s' if self.users != 1 else ''} "
                f"and had {self.requests_in_flight} request{'s' if self.requests_in_flight != 1 else ''} in flight")


class UserProcesses:
    """Where the users run (see the module docstring)."""

    lead_time_s = 0.05  # how far ahead a round's start must be for every process to get it in time
    settle_s = 0.1  # how long 0 requests in flight must hold before every record sent is in

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.lost: list[LostWorker] = []

    def worker_ids(self) -> tuple[str, ...]:
        """The processes' ids in share order (none for this process alone)."""
        return ()

    def capacity(self) -> int:
        """The users spawned now, over every process."""
        return self.environment.runner.user_count

    def begin(self, config: RunConfig) -> None:
        """A test starts: its configuration to every process that runs users."""
        raise NotImplementedError

    def announce(self, message: dict[str, Any]) -> None:
        """A load mode's message to its users' half on every process."""
        raise NotImplementedError

    def dispatch(self, assignments: list[Assignment]) -> None:
        raise NotImplementedError

    def settle(self, request_id: str) -> None:
        """A record came back: nobody holds that request any more."""

    def streams_in_flight(self) -> int:
        raise NotImplementedError

    def selfwatch(self) -> list[dict[str, Any]]:
        """Each process's self-watch figures (`loadlib.run.selfwatch`), the master's too."""
        raise NotImplementedError

    def clock_offsets(self) -> list[dict[str, Any]] | None:
        """Each worker's clock offset to this process's (`loadlib.run.clock_sync`); None when
        the users run in this process (one clock)."""
        return None

    def end(self) -> None:
        """The test ends: wait (bounded) for what the processes still have to send."""

    def resample(self, ttft: np.ndarray, decode: np.ndarray, meets: np.ndarray, ttft_q: float, decode_q: float,
                 seed: int) -> np.ndarray:
        """A capacity level's resampled statistics (`slo_resamples.Resample`): drawn here."""
        return resampled_statistics(ttft, decode, meets, ttft_q, decode_q, seed)


class LocalUsers(UserProcesses):
    """The users run in this process: assignments and messages go straight to its `ModeState`."""

    def __init__(self, environment: Environment, run: ProcessRun,
                 add_live: Callable[[str, dict[str, Any]], None]) -> None:
        super().__init__(environment)
        self.run = run
        self._add_live = add_live
        gevent.spawn(self._sample_live)
        environment.events.test_start.add_listener(lambda **_: run.watch.start())
        environment.events.test_stop.add_listener(lambda **_: run.watch.stop())

    def begin(self, config: RunConfig) -> None:
        self.run.start(config)

    def announce(self, message: dict[str, Any]) -> None:
        self.run.mode_state.on_message(message)

    def dispatch(self, assignments: list[Assignment]) -> None:
        for assignment in assignments:
            self.run.mode_state.take(assignment)

    def streams_in_flight(self) -> int:
        return self.run.watch.in_flight

    def selfwatch(self) -> list[dict[str, Any]]:
        return [self.run.watch.snapshot()]

    def _sample_live(self) -> None:
        """This process's running figures, once a second while streams are in flight."""
        while True:
            gevent.sleep(LIVE_S)
            counters = live_figures.COUNTERS
            if counters.in_flight or counters.finished:
                self._add_live("local", counters.snapshot_and_reset())
