"""A sweep played in one test: each configuration of the profile's `[server]` in turn, its server
started (`launch`), the profile's load run against it by the mode's own driver, the server stopped.

To the run a sweep is one more load mode (`Sweep`, which `loadlib.modes.mode_of` gives a profile
with a `[server]`), whose driver plays the profile's own mode's drivers one after another: the run
never asks whether it is a sweep. Each configuration becomes the profile with one target, labelled
as the configuration, whose host is the server just started: `Coordination.serve` hands it to
every process (the users send there from then on, its server is watched in `targets/<label>/`),
and the records keep the label. So every report reads a sweep as it reads an A/B run, one
configuration after another instead of cell by cell. A configuration whose server does not come
up, or dies during its load, is a row of the manifest's `sweep` with its status and the last
lines of its log, and the sweep goes on with the next.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import gevent

from loadlib.modes.base import Coordination, Driver, DriverOfDrivers, LoadMode, ModeState, Phase
from loadlib.profiles import TargetSpec
from loadlib.scenarios.base import Cell
from loadlib.sweep.grid import ServerConfig, configurations
from loadlib.sweep.known_warnings import scan_log
from loadlib.sweep.launch import DIED, OK, RunningServer, launch, log_tail

if TYPE_CHECKING:
    from loadlib.profiles import Profile
    from loadlib.run.config import RunConfig

log = logging.getLogger("uni-bench")

SERVERS_DIR = "servers"  # each configuration's server log, `<label>.log`
WATCH_S = 1.0  # how often a configuration's server is checked while its load runs
STOPPED = "stopped"  # a configuration cut short by the end of the test
CONFIG_FINDINGS = ("search",)  # manifest keys a mode's driver notes that belong to its configuration


class SweepDriver(DriverOfDrivers):
    """The configurations of `profile.server` one after another, each played by `mode`'s driver."""

    wants_records = True  # the modes' drivers that wait for their records are fed them through this one

    def __init__(self, run: Coordination, users: int, profile: "Profile", mode: LoadMode) -> None:
        super().__init__(run, users)
        assert run.run_dir is not None, "a sweep keeps its servers' logs in the run directory"
        self.profile, self.mode = profile, mode
        self.logs = run.run_dir / SERVERS_DIR
        self.configs = configurations(profile.server)
        self.rows: list[dict[str, Any]] = []
        self.server: RunningServer | None = None
        self.launching: ServerConfig | None = None  # a configuration whose server is starting
        self._found: dict[str, Any] = {}  # the configuration's own findings (`CONFIG_FINDINGS`)
        self._most_users = 0

    def play(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        for index, config in enumerate(self.configs):
            self.phase = Phase("starting", note=f"server {index + 1} of {len(self.configs)}: {config.label}")
            log.info("sweep: configuration %d of %d, %s", index + 1, len(self.configs), config.label)
            self._play(config)
            if self.stopped:
                return

    def _play(self, config: ServerConfig) -> None:
        self.launching = config
        server = self.server = launch(config, self.profile.server, self.logs / f"{config.label}.log")
        self.launching = None
        if server.status != OK:
            log.warning("sweep: %s %s; going on with the next", config.label, server.status)
            self._note(server)
            return
        profile = self.profile.model_copy(update={"server": None,
                                                  "targets": [TargetSpec(label=config.label, host=server.host)]})
        started_at = self.run.serve(profile)
        self.flush_cache(config.label)
        self._found = {}
        inner = self.inner = self.mode.driver(profile, self.users, started_at, replace(self.run, note=self._inner_note))
        playing = gevent.spawn(inner.run_to_end)
        while not inner.finished.wait(WATCH_S):
            if not server.alive():
                log.error("sweep: the server of %s died during its load; going on with the next", config.label)
                playing.kill()
                break
        server.stop()
        self.run.retire(config.label)
        if inner.stopped and server.status != DIED:
            self.stopped = inner.stopped
        self._note(server, inner.stopped)

    @property
    def plan(self) -> list[Cell]:
        """The cells of each configuration's mode played so far, the playing one's as far as it knows
        them (a capacity search adds its levels as it finds them)."""
        return [cell for driver in self._played for cell in driver.plan]

    @plan.setter
    def plan(self, cells: list[Cell]) -> None:
        """Only `Driver.__init__`'s empty plan: a sweep's cells are its configurations' modes'."""
        if cells:
            raise ValueError("a sweep's plan comes from the modes it plays")

    def _inner_note(self, key: str, value: Any) -> None:
        """A configuration's finding: a search's result is that configuration's (its sweep row),
        anything else the run's."""
        if key in CONFIG_FINDINGS:
            self._found[key] = value
        else:
            self.run.note(key, value)

    def _note(self, server: RunningServer, stopped: str | None = None) -> None:
        row = {**server.entry(), **self._found}
        self._found = {}
        for warning in row["warnings"]:
            log.warning("sweep: %s: %s", server.config.label, warning)
        if stopped and row["status"] == OK:
            row.update(status=STOPPED, reason=stopped)
        self.rows.append(row)
        self.run.note("sweep", self.rows)

    def users_wanted(self, now: float) -> int:
        """The configuration's mode's wish, never fewer users than before (none before the first
        server is up): Locust stops whichever users it likes, and a levelled mode's next search or
        ladder from its first level needs its low stream numbers, which idle users above it keep."""
        self._most_users = max(self._most_users, super().users_wanted(now))
        return self._most_users

    def close(self) -> None:
        """The test ended: the server running now is stopped (its row says so); one still starting
        is stopped when the tool exits (`launch`), its row written now."""
        config = self.launching
        if config is not None:
            path = self.logs / f"{config.label}.log"
            self.rows.append({"label": config.label, "config": dict(config.values), "status": STOPPED,
                              "reason": "the test ended while its server was starting",
                              "log_tail": log_tail(path), "warnings": scan_log(path)})
            self.run.note("sweep", self.rows)
            return
        server = self.server
        if server is not None and not server.ended_at:
            server.stop()
            super().close()
            if not any(row["label"] == server.config.label for row in self.rows):
                self._note(server, "the test ended during this configuration")


class Sweep(LoadMode):
    """A profile's load mode played once per configuration of its `[server]`: its driver is a
    `SweepDriver`, and no user is spawned before the first server is up; what the processes that
    run users do is the mode's own (each configuration's profile has that mode and one target)."""

    starts_servers = True

    def __init__(self, mode: LoadMode) -> None:
        self.mode = mode
        self.fixed_streams = mode.fixed_streams

    @property
    def name(self) -> str:
        return self.mode.name

    def user_kind(self, load: Any) -> Any:
        return self.mode.user_kind(load)

    def first_users(self, load: Any, users: int) -> int:
        return 0

    def driver(self, profile: "Profile", users: int, started_at: float, run: Coordination) -> Driver:
        return SweepDriver(run, users, profile, self.mode)

    def begin(self, config: "RunConfig", share: tuple[int, int]) -> ModeState:
        return self.mode.begin(config, share)

    def notes(self, profile: "Profile", context_tokens: int | None) -> dict[str, Any]:
        return self.mode.notes(profile, context_tokens)
