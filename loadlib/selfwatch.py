"""The client watches itself: CPU share and event-loop lag of this process during a run.

A load generator that is itself saturated measures its own delays, not the server's. A greenlet
wakes every `interval_s`; how late it wakes is the loop lag that every timestamp may carry, and
process CPU time over wall time is the share of a core this process used. Lag counts only while
a request is in flight (`in_flight`, kept by the users): a pause while nothing is being timed
(start-up, the end-of-run summary) delays no measurement.
"""

from __future__ import annotations

import time
from typing import Any

import gevent

CPU_LIMIT_SHARE = 0.9  # above this, the client may have been the bottleneck
LAG_LIMIT_S = 0.005  # a p99 loop lag above this may have delayed timestamps


class SelfWatch:
    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.in_flight = 0  # requests being timed right now, kept by the users
        self.lags: list[float] = []
        self.cpu_shares: list[float] = []  # one per second
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
                self.lags.append(max(now - before - self.interval_s, 0.0))
            if now - window_wall >= 1.0:
                cpu = time.process_time()
                self.cpu_shares.append((cpu - window_cpu) / (now - window_wall))
                window_wall, window_cpu = now, cpu

    def snapshot(self) -> dict[str, Any]:
        """Summary figures so far: CPU share mean/max, loop lag p50/p99/max in seconds."""
        lags = sorted(self.lags)
        shares = self.cpu_shares
        return {
            "cpu_share_mean": sum(shares) / len(shares) if shares else 0.0,
            "cpu_share_max": max(shares) if shares else 0.0,
            "loop_lag_p50_s": _quantile(lags, 0.5),
            "loop_lag_p99_s": _quantile(lags, 0.99),
            "loop_lag_max_s": lags[-1] if lags else 0.0,
            "samples": len(lags),
        }


def client_limited(snapshots: list[dict[str, Any]]) -> list[str]:
    """Reasons to suspect the client limited the figures, from one snapshot per process."""
    reasons = []
    for snap in snapshots:
        if snap.get("cpu_share_max", 0.0) > CPU_LIMIT_SHARE:
            reasons.append(f"a client process used {snap['cpu_share_max']:.0%} of a core")
        if snap.get("loop_lag_p99_s", 0.0) > LAG_LIMIT_S:
            reasons.append(f"client event-loop lag p99 was {snap['loop_lag_p99_s'] * 1000:.1f} ms")
    return reasons


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(int(q * len(sorted_values)), len(sorted_values) - 1)]
