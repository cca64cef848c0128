"""The server under test: the `--host` given (or typed in the web UI's form), else the built-in
simulator, which the run starts on 127.0.0.1 when Locust was started without a host and stops
when Locust quits."""

from __future__ import annotations

import logging
import shlex
from typing import Any

from locust.env import Environment

from loadlib.profiles import Profile, TargetSpec
from loadlib.run.inputs import usage_error
from loadlib.wire.connection import Endpoint

log = logging.getLogger("uni-bench")


class Target:
    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.simulator: Any = None
        self.target_simulators: dict[str, Any] = {}  # an A/B run's own simulators, by their sim_args

    def start(self, profile: Profile | None) -> None:
        """Checks the --host, or starts the built-in simulator when there is none. A profile that
        names its servers (an A/B run's `[[targets]]`, a sweep's `[server]`) refuses --host; the
        first target becomes the users' host, a sweep's each server in turn."""
        named = profile.servers_table() if profile is not None else None
        if named:
            if self.environment.host:
                usage_error(f"--host: the profile names its servers in {named}; leave --host out")
            if profile.targets:
                self.environment.host = self.servers(profile.targets)[0][1]
            return
        if not self.environment.host:
            from loadlib.sim.process import start_simulator

            self.simulator = start_simulator(shlex.split(self.environment.parsed_options.sim_args))
            self.environment.host = self.simulator.url
            log.info("No --host given: started the built-in simulator at %s", self.simulator.url)
            return
        try:
            Endpoint.parse(self.environment.host)
        except ValueError as exc:
            usage_error(f"--host: {exc}")

    def stop(self) -> None:
        for simulator in [self.simulator, *self.target_simulators.values()]:
            if simulator is not None:
                simulator.stop()
        self.simulator, self.target_simulators = None, {}

    def servers(self, targets: list[TargetSpec]) -> tuple[tuple[str, str], ...]:
        """An A/B run's (label, base URL): its host, or a built-in simulator of its own (started
        once per `sim_args` and kept for the next test)."""
        return tuple((target.label, target.host or self._simulator_url(target.sim_args)) for target in targets)

    def _simulator_url(self, sim_args: str) -> str:
        if sim_args not in self.target_simulators:
            from loadlib.sim.process import start_simulator

            self.target_simulators[sim_args] = start_simulator(shlex.split(sim_args))
            log.info("started a built-in simulator (%s) at %s", sim_args or "default",
                     self.target_simulators[sim_args].url)
        return self.target_simulators[sim_args].url

    def described(self, label: str, url: str) -> dict[str, Any]:
        """The manifest's entry for an A/B run's target."""
        simulator = next((args for args, sim in self.target_simulators.items() if sim.url == url), None)
        return {"label": label, "url": url, "builtin_simulator": simulator is not None, "simulator_args": simulator}

    @property
    def url(self) -> str:
        """The host this test sends to (the web UI's form may have changed it)."""
        return self.environment.host or ""

    @property
    def builtin(self) -> bool:
        """Whether this test's host is the built-in simulator."""
        return self.simulator is not None and self.url.rstrip("/") == self.simulator.url.rstrip("/")

    def label(self) -> str:
        """A run directory's default label: "sim", the host's name, or "sweep" (no host: a sweep's
        servers come one at a time)."""
        if not self.url:
            return "sweep"
        return "sim" if self.builtin else Endpoint.parse(self.url).host.replace(".", "-")

    def description(self) -> dict[str, Any]:
        """The manifest's `target`."""
        return {"url": self.url, "builtin_simulator": self.builtin,
                "simulator_args": self.environment.parsed_options.sim_args if self.builtin else None}
