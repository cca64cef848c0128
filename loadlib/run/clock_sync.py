"""Each worker's clock offset to the master's, measured over Locust's messages, NTP-style.

A worker sends a burst of pings, each stamped when it left (t0, the worker's clock); the master
stamps each when it came (t1) and when its answer left (t2); the worker stamps the answer when it
came (t3). For one ping, the master's clock minus the worker's is ((t1 - t0) + (t2 - t3)) / 2, and
the round trip (t3 - t0) - (t2 - t1): the offset is right to within half of it, however the way
there and back split it. Of a burst, the ping with the shortest round trip is kept
(`estimate`): the least delayed by a busy event loop on either side.

The worker measures when it starts, at each test's start (the master waits for every worker's
offset before the load mode plays: `ClockOffsets.wait`), every `MEASURE_EVERY_S` during the test,
and once more at the test's end; each time it sets the result
in `loadlib.clock` (its records' times and its schedule then read the master's clock) and sends
it to the master, which keeps them for the manifest's `clock_offsets` (`ClockOffsets.described`):
how far each worker's clock is from the master's, how well that is known, and how it moved.
On one host the offset is ~0 and known to a fraction of a millisecond.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

import gevent
from gevent.event import AsyncResult
from locust.runners import MasterRunner, WorkerRunner

from loadlib import clock

log = logging.getLogger("uni-bench")

PING_MESSAGE = "uni:clock-ping"  # worker -> master: {"t0": worker clock}
PONG_MESSAGE = "uni:clock-pong"  # master -> that worker: {"t0", "t1", "t2"}
OFFSET_MESSAGE = "uni:clock"  # worker -> master: one `Measurement` (as a dict)
PINGS = 8  # per burst
PING_GAP_S = 0.01
PONG_WAIT_S = 0.5  # a ping unanswered this long is dropped from its burst
MEASURE_EVERY_S = 30.0  # a drift of 300 ppm moves the offset 10 ms (CLOCK_LIMIT_S) in this time
FIRST_WAIT_S = 3.0  # how long a test's start waits for every worker's offset


@dataclass(frozen=True)
class Measurement:
    """One burst's result: at `at` (the master's clock), the master's clock minus the worker's
    was `offset_s`, give or take `uncertainty_s` (half the shortest round trip), from `pings`
    answered pings."""

    at: float
    offset_s: float
    uncertainty_s: float
    pings: int


def estimate(samples: list[tuple[float, float, float, float]]) -> tuple[float, float] | None:
    """(offset, uncertainty) from the (t0, t1, t2, t3) of a burst's answered pings: the ping with
    the shortest round trip; None for no answered ping."""
    if not samples:
        return None
    t0, t1, t2, t3 = min(samples, key=lambda s: (s[3] - s[0]) - (s[2] - s[1]))
    return ((t1 - t0) + (t2 - t3)) / 2, max((t3 - t0) - (t2 - t1), 0.0) / 2


class WorkerClock:
    """A worker's side: bursts of pings to the master; each result applied and reported."""

    def __init__(self, runner: WorkerRunner) -> None:
        self.runner = runner
        self._waiting: dict[float, AsyncResult] = {}
        self._loop: gevent.Greenlet | None = None
        runner.register_message(PONG_MESSAGE, self._on_pong)

    def start(self) -> None:
        """Measures now (in the background) and then every `MEASURE_EVERY_S`."""
        if self._loop is None:
            self._loop = gevent.spawn(self._every)

    def measure(self) -> Measurement | None:
        """One burst: the offset set in `loadlib.clock` and sent to the master; None when the
        master answered no ping (the offset then stays as it was)."""
        samples = []
        for _ in range(PINGS):
            t0 = clock.host_time()
            answer = self._waiting[t0] = AsyncResult()
            self.runner.send_message(PING_MESSAGE, {"t0": t0})
            try:
                t1, t2, t3 = answer.get(timeout=PONG_WAIT_S)
                samples.append((t0, t1, t2, t3))
            except gevent.Timeout:
                pass
            finally:
                self._waiting.pop(t0, None)
            gevent.sleep(PING_GAP_S)
        found = estimate(samples)
        if found is None:
            log.warning("clock offset to the master not measured: none of %d pings was answered", PINGS)
            return None
        clock.set_offset(found[0])
        measurement = Measurement(clock.now(), found[0], found[1], len(samples))
        self.runner.send_message(OFFSET_MESSAGE, asdict(measurement))
        return measurement

    def _every(self) -> None:
        while True:
            self.measure()
            gevent.sleep(MEASURE_EVERY_S)

    def _on_pong(self, msg: Any, **_kwargs: Any) -> None:
        t3 = clock.host_time()
        answer = self._waiting.get(msg.data["t0"])
        if answer is not None:
            answer.set((msg.data["t1"], msg.data["t2"], t3))


class ClockOffsets:
    """The master's side: answers every ping at once, and keeps each worker's measurements."""

    def __init__(self, runner: MasterRunner) -> None:
        self.runner = runner
        self.by_worker: dict[str, list[Measurement]] = {}
        runner.register_message(PING_MESSAGE, self._on_ping)
        runner.register_message(OFFSET_MESSAGE, self._on_offset)

    def begin(self) -> None:
        """A test starts: each worker's measurements from now on, after its latest one before."""
        self.by_worker = {worker: found[-1:] for worker, found in self.by_worker.items()}

    def wait(self, worker_ids: tuple[str, ...], before: dict[str, int]) -> None:
        """Waits (bounded) until each worker has sent one more measurement than `before` (its
        count then): its records and its start times read the master's clock from then on."""
        deadline = time.monotonic() + FIRST_WAIT_S
        late = set(worker_ids)
        while late and time.monotonic() < deadline:
            gevent.sleep(0.01)
            late = {worker for worker in late if len(self.by_worker.get(worker, ())) <= before.get(worker, 0)}
        if late:
            log.warning("clock offset not measured in %.0f s for worker(s) %s: their first requests may carry "
                        "their own clock's times", FIRST_WAIT_S, ", ".join(sorted(late)))

    def counts(self) -> dict[str, int]:
        return {worker: len(found) for worker, found in self.by_worker.items()}

    def described(self, worker_ids: tuple[str, ...]) -> list[dict[str, Any]]:
        """The manifest's `clock_offsets`: per worker (in share order, `index` as its records'
        `worker`), its latest offset, the worst uncertainty, how far the offset moved between two
        measurements (`largest_step_s`) and over the test (`drift_s`), and the first and last."""
        described = []
        for index, worker in enumerate(worker_ids):
            found = self.by_worker.get(worker, [])
            entry: dict[str, Any] = {"worker": worker, "index": index, "measurements": len(found)}
            if found:
                offsets = [m.offset_s for m in found]
                entry.update(offset_s=offsets[-1], uncertainty_s=max(m.uncertainty_s for m in found),
                             largest_step_s=max((abs(b - a) for a, b in zip(offsets, offsets[1:])), default=0.0),
                             drift_s=offsets[-1] - offsets[0], first=asdict(found[0]), last=asdict(found[-1]))
            described.append(entry)
        return described

    def _on_ping(self, msg: Any, **_kwargs: Any) -> None:
        t1 = clock.now()
        self.runner.send_message(PONG_MESSAGE, {"t0": msg.data["t0"], "t1": t1, "t2": clock.now()},
                                 client_id=msg.node_id)

    def _on_offset(self, msg: Any, **_kwargs: Any) -> None:
        self.by_worker.setdefault(msg.node_id, []).append(Measurement(**msg.data))
