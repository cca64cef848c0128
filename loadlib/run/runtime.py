"""What each Locust process of a run holds for its users, and how records leave it.

Every process that runs users (the local runner, each worker) has one `ProcessRun`: the current
test's `RunConfig` (from the coordinator), its load mode's users' half (`ModeState`: what the
users' tasks do), the scenarios prepared for it, the self-watch, and the `RecordSink` where each
finished record goes. Users reach it through
`process_run(environment)`: a typed object, not attributes hung on Locust's environment.

A local runner's sink hands each record to the session, which writes it to the journal at once. A
worker's sink batches records as JSON lines and sends them to the master every `FLUSH_S` seconds or
`FLUSH_RECORDS` records, whichever comes first (a record a round waits for goes at once), so the
master does no per-request messaging; each batch also carries how many requests the worker has in
flight, which the master waits for at the end of a free-running run, and, once a second, the
running figures of its streams in flight (`live.COUNTERS`) for the live charts.
"""

from __future__ import annotations

import gc
import time
import weakref
from typing import Any, Callable, Hashable

import gevent
from gevent.event import Event
from locust.env import Environment

from loadlib.figures import live as live_figures
from loadlib.modes import ModeState
from loadlib.records import RequestRecord
from loadlib.run.config import RunConfig
from loadlib.run.selfwatch import SelfWatch
from loadlib.scenarios import Scenario
from loadlib.wire.client import ChatSettings

RECORDS_MESSAGE = "uni:records"  # worker -> master: {"lines": bytes, "in_flight": int, "live": dict | None}
CONFIG_MESSAGE = "uni:config"  # master -> workers: the RunConfig, once per test
MODE_MESSAGE = "uni:mode"  # master -> workers: a load mode's announcement to its ModeState
ASSIGN_MESSAGE = "uni:assign"  # master -> one worker: assignments (Assignment.to_message) for its users
PID_MESSAGE = "uni:pid"  # worker -> master: its process id, at each test start (a lost worker is named by it)
DRAIN_MESSAGE = "uni:drain"  # master -> workers: the test ended; send what you have once nothing is in flight
DRAINED_MESSAGE = "uni:drained"  # worker -> master: every record it had is sent
FLUSH_S = 0.5
FLUSH_RECORDS = 500
LIVE_S = 1.0  # how often the running figures of streams in flight go to the coordinator


class RecordSink:
    """Where a process's finished records go."""

    def add(self, record: RequestRecord, urgent: bool = False) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Sends what is waiting (the end of a test)."""


class LocalSink(RecordSink):
    """The coordinator is in this process: each record goes to it (and its journal) at once."""

    def __init__(self, take: Callable[[RequestRecord], None]) -> None:
        self.take = take

    def add(self, record: RequestRecord, urgent: bool = False) -> None:
        self.take(record)


class WorkerSink(RecordSink):
    """Batches a worker's records to the master as JSON lines."""

    def __init__(self, send: Callable[[str, Any], None], watch: SelfWatch) -> None:
        self.send = send
        self.watch = watch
        self._lines: list[bytes] = []
        self._sent_in_flight = 0
        self._live_at = 0.0
        self._live_in_flight = 0  # streams in flight in the last running figures sent
        self._greenlet = gevent.spawn(self._tick)

    def add(self, record: RequestRecord, urgent: bool = False) -> None:
        self._lines.append(record.to_json())
        if urgent or len(self._lines) >= FLUSH_RECORDS:
            self.flush()

    def flush(self, live: dict[str, Any] | None = None) -> None:
        lines, self._lines = self._lines, []
        self._sent_in_flight = in_flight = self.watch.in_flight
        self.send(RECORDS_MESSAGE, {"lines": b"\n".join(lines), "in_flight": in_flight, "live": live})

    def _tick(self) -> None:
        while True:
            gevent.sleep(FLUSH_S)
            live = None
            counters = live_figures.COUNTERS
            due = time.monotonic() - self._live_at >= LIVE_S
            if due and (counters.in_flight or self._lines or counters.in_flight != self._live_in_flight):
                self._live_at, self._live_in_flight = time.monotonic(), counters.in_flight
                live = counters.snapshot_and_reset()  # the last one says when the streams dropped to 0
            if live is not None or self._lines or self.watch.in_flight != self._sent_in_flight:
                self.flush(live)


class PreparedScenarios:
    """This process's scenarios for the current test, each primed and calibrated once: by the
    first user that asks for it; the others wait until it is ready."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, tuple[Scenario, Event]] = {}

    def get(self, key: Hashable, build: Callable[[], Scenario], prepare: Callable[[Scenario], None]) -> Scenario:
        if key not in self._entries:
            ready = Event()
            scenario = build()
            self._entries[key] = (scenario, ready)
            try:
                prepare(scenario)
            finally:
                ready.set()
        scenario, ready = self._entries[key]
        ready.wait()
        return scenario


class ProcessRun:
    """One process's share of the run; see the module docstring."""

    def __init__(self, environment: Environment, settings: ChatSettings, sink: RecordSink,
                 watch: SelfWatch) -> None:
        self.environment = environment
        self.settings = settings  # before any test: the options' (a locustfile's users may be made early)
        self.sink = sink
        self.watch = watch
        self.config: RunConfig | None = None
        self.mode_state: ModeState | None = None
        self.scenarios = PreparedScenarios()
        self._slots: set[int] = set()

    def start(self, config: RunConfig) -> None:
        """A test starts here: its configuration applies from now, its mode's users' half and its
        scenarios start afresh."""
        self.config = config
        self.settings = config.settings
        self.scenarios = PreparedScenarios()
        self.mode_state = config.load_mode.begin(config, self.worker_share)

    @property
    def users(self) -> int:
        return self.config.users if self.config is not None else 1

    @property
    def worker_share(self) -> tuple[int, int]:
        """(this process's index, processes running users) for splitting shared work."""
        if self.config is None:
            return 0, 1
        return self.config.share(getattr(self.environment.runner, "client_id", None))

    def take_slot(self) -> int:
        """The lowest user slot of this process that no running user holds (a user stopped by a
        lower user count frees its slot for the next one spawned)."""
        slot = min(set(range(len(self._slots) + 1)) - self._slots)
        self._slots.add(slot)
        return slot

    def release_slot(self, slot: int) -> None:
        self._slots.discard(slot)

    def stream_number(self, slot: int) -> int:
        """A run-wide stream number for this process's user `slot`: Locust hands users to
        workers in turn, so slot k of worker i is stream k * workers + i."""
        index, count = self.worker_share
        return slot * count + index


_RUNS: "weakref.WeakKeyDictionary[Environment, ProcessRun]" = weakref.WeakKeyDictionary()


def attach(environment: Environment, run: ProcessRun) -> None:
    _RUNS[environment] = run
    environment.events.test_start.add_listener(_freeze_heap)


def _freeze_heap(**_kwargs: Any) -> None:
    """What was allocated before the load (Locust, pandas, the locustfile: some 100,000 objects)
    leaves the collector's full scans: one of them stalls the event loop ~50 ms, mid-stream,
    where a full collection of the run's own objects takes a few ms."""
    gc.freeze()


def process_run(environment: Environment) -> ProcessRun:
    """This process's run, for its users."""
    run = _RUNS.get(environment)
    if run is None:
        raise RuntimeError("no uni-bench run in this process: import loadlib (e.g. `from loadlib import LLMUser`) "
                           "in the locustfile")
    return run
