"""What each Locust process of a run holds for its users, and how records leave it.

Every process that runs users (the local runner, each worker) has one `ProcessRun`: the request
settings, what the coordinator announced for the current test (`RunSpec`: model, load mode, the
free-running timeline, the worker's share), the rounds assignments waiting for a user, the
self-watch, and the `RecordSink` where each finished record goes. Users reach it through
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
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import gevent
from gevent.queue import Queue
from locust.env import Environment

from loadlib.figures import live as live_figures
from loadlib.records import RequestRecord
from loadlib.run.selfwatch import SelfWatch
from loadlib.wire.client import ChatSettings

RECORDS_MESSAGE = "uni:records"  # worker -> master: {"lines": bytes, "in_flight": int, "live": dict | None}
RUN_MESSAGE = "uni:run"  # master -> workers: the RunSpec, once per test
LEVEL_MESSAGE = "uni:level"  # master -> workers: a search level's span (loadlib.modes.search_driver.Span), as it is chosen
FLUSH_S = 0.5
FLUSH_RECORDS = 500
LIVE_S = 1.0  # how often the running figures of streams in flight go to the coordinator


@dataclass(frozen=True)
class RunSpec:
    """What the coordinator announces at each test start, the same for every process."""

    mode: str  # a key of loadlib.modes.MODES, or "locust" (the locustfile's own users)
    model: str
    max_tokens: int  # the run's request defaults (a profile's [request] included)
    thinking: Any
    started_at: float  # wall clock: where a free-running timeline starts
    users: int  # the -u the run was asked for
    profile: dict[str, Any] | None = None  # the resolved profile (free-running modes)
    workers: list[str] = field(default_factory=list)  # worker ids in share order (distributed runs)
    context_tokens: int | None = None  # the model's context, where /v1/models says (a trace skips longer lines)

    def to_message(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> "RunSpec":
        return cls(**data)


def dispatch_order(worker_ids: list[str]) -> list[str]:
    """Worker ids in the order Locust's users dispatcher hands them users (`UsersDispatcher.
    _sort_workers`: by id, then the n-th worker of every host before any (n+1)-th), so that a
    worker's share index is where its users fall among all the streams."""
    within_host: dict[str, int] = {}
    rank = {}
    for worker_id in sorted(worker_ids):
        host = worker_id.split("_")[0]
        rank[worker_id] = within_host.get(host, 0)
        within_host[host] = rank[worker_id] + 1
    return sorted(worker_ids, key=lambda worker_id: (rank[worker_id], worker_id))


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


class ProcessRun:
    """One process's share of the run; see the module docstring."""

    def __init__(self, environment: Environment, settings: ChatSettings, sink: RecordSink,
                 watch: SelfWatch) -> None:
        self.environment = environment
        self.settings = settings
        self.sink = sink
        self.watch = watch
        self.assignments: Queue = Queue()  # rounds mode: what the conductor wants sent here
        self.spec: RunSpec | None = None
        self.state: dict[Any, Any] = {}  # per-test state of the users' classes (scenarios, schedules)
        self._slots: set[int] = set()

    def start(self, spec: RunSpec) -> None:
        """A test starts here: the spec applies from now, per-test state starts afresh."""
        self.spec = spec
        self.settings = ChatSettings(**{**asdict(self.settings), "model": spec.model,
                                        "max_tokens": spec.max_tokens, "thinking": spec.thinking})
        self.state = {}

    @property
    def worker_share(self) -> tuple[int, int]:
        """(this process's index, processes running users) for splitting shared work."""
        runner = self.environment.runner
        my_id = getattr(runner, "client_id", None)
        workers = self.spec.workers if self.spec is not None else []
        if my_id in workers:
            return workers.index(my_id), len(workers)
        return 0, 1

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
