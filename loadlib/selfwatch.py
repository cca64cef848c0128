"""The client watches itself: CPU share and event-loop lag of this process during a run.

A load generator that is itself saturated measures its own delays, not the server's. A greenlet
wakes every `interval_s`; how late it wakes is the loop lag that every timestamp may carry, and
process CPU time over wall time is the share of a core this process used. Lag counts only while
a request is in flight (`in_flight`, kept by the users): a pause while nothing is being timed
(start-up, the end-of-run summary) delays no measurement.

Its memory does not grow with the run: lags go into a fixed histogram of 0.1 ms buckets, CPU
shares into a running sum and maximum. The master watches itself too (`role` "master"): it times
nothing, but a master short of CPU receives records late and spawns users late.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
import numpy as np

CPU_LIMIT_SHARE = 0.9  # above this, the client may have been the bottleneck
LAG_LIMIT_S = 0.005  # a p99 loop lag above this may have delayed timestamps


LAG_BUCKET_S = 0.0001
LAG_BUCKETS = 20_000  # up to 2 s; longer lags count in the last bucket (their maximum is kept apart)


class SelfWatch:
    def __init__(self, interval_s: float = 0.05, role: str = "client") -> None:
        self.interval_s = interval_s
        self.role = role  # "client" (a process that runs users) or "master"
        self.in_flight = 0  # requests being timed right now, kept by the users
        self.lag_counts = np.zeros(LAG_BUCKETS, dtype=np.int64)
        self.lag_max_s = 0.0
        self.cpu_share_sum = 0.0
        self.cpu_share_max = 0.0
        self.cpu_windows = 0  # one a second
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._watch)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _watch(self) -> None:
        window_wall, window_cpu = time.perf_counter(), time.process_time()
        while True:
            before = time.perf_counter()
            timing = self.in_flight > 0
            gevent.sleep(self.interval_s)
            if self._greenlet is None:  # stopped while asleep: what follows is not the run's lag
                return
            now = time.perf_counter()
            if timing or self.in_flight > 0:
                lag = max(now - before - self.interval_s, 0.0)
                self.lag_counts[min(int(lag / LAG_BUCKET_S), LAG_BUCKETS - 1)] += 1
                self.lag_max_s = max(self.lag_max_s, lag)
            if now - window_wall >= 1.0:
                cpu = time.process_time()
                share = (cpu - window_cpu) / (now - window_wall)
                self.cpu_share_sum += share
                self.cpu_share_max = max(self.cpu_share_max, share)
                self.cpu_windows += 1
                window_wall, window_cpu = now, cpu

    def snapshot(self) -> dict[str, Any]:
        """Summary figures so far: CPU share mean/max, loop lag p50/p99 (to 0.1 ms) and max in
        seconds, and the process's role."""
        return {
            "role": self.role,
            "cpu_share_mean": self.cpu_share_sum / self.cpu_windows if self.cpu_windows else 0.0,
            "cpu_share_max": self.cpu_share_max,
            "loop_lag_p50_s": self._lag_quantile(0.5),
            "loop_lag_p99_s": self._lag_quantile(0.99),
            "loop_lag_max_s": self.lag_max_s,
            "samples": int(self.lag_counts.sum()),
        }

    def _lag_quantile(self, q: float) -> float:
        """The upper edge of the bucket holding the `q` quantile (0 with no samples)."""
        cumulative = np.cumsum(self.lag_counts)
        if not cumulative[-1]:
            return 0.0
        bucket = int(np.searchsorted(cumulative, q * cumulative[-1], side="left"))
        return min((bucket + 1) * LAG_BUCKET_S, self.lag_max_s)


def client_limited(snapshots: list[dict[str, Any]]) -> list[str]:
    """Reasons to suspect the client limited the figures, from one snapshot per process."""
    reasons = []
    for snap in snapshots:
        if snap.get("cpu_share_max", 0.0) > CPU_LIMIT_SHARE:
            who = ("the master (it receives every record and spawns the users)" if snap.get("role") == "master"
                   else "a client process")
            reasons.append(f"{who} used {snap['cpu_share_max']:.0%} of a core")
        if snap.get("loop_lag_p99_s", 0.0) > LAG_LIMIT_S:
            reasons.append(f"client event-loop lag p99 was {snap['loop_lag_p99_s'] * 1000:.1f} ms")
    return reasons
