"""The client watches itself: CPU share and event-loop lag of this process during a run.

A load generator that is itself saturated measures its own delays, not the server's. A greenlet
wakes every `interval_s`; how late it wakes is the loop lag that every timestamp may carry, and
process CPU time over wall time is the share of a core this process used. Lag counts only while
requests were in flight (`in_flight`, kept by the users) when the watch went to sleep and when it
woke: a pause that began while nothing was being timed (start-up, a cell's end line between two
rounds cells, the end-of-run summary) delays no measurement, and no request could start during it.

Lag alone does not say whose fault it was. Each second the watch also reads how busy the machine
was: processes waiting to run (`procs_running` in /proc/stat, against the cores), the CPU share
stolen by a hypervisor, and this process's involuntary context switches. A client near a whole
core was short of CPU itself (it may have capped the load and delayed timestamps); a client with
CPU to spare on a busy machine lost its turn to other processes (its timestamps may be late by
about the lag, the load it offered was not limited by it).

Its memory does not grow with the run: lags go into a fixed histogram of 0.1 ms buckets, CPU
shares into a running sum and maximum. The master watches itself too (`role` "master"): it times
nothing, but a master short of CPU receives records late and spawns users late. What the snapshots
mean for the figures is judged in `loadlib.figures.client_limits`.
"""

from __future__ import annotations

import os
import time
from typing import Any

import gevent
import numpy as np
import psutil

from loadlib.figures.client_limits import LAG_LIMIT_S

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
        self.machine = MachineLoad()
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
            if timing and self.in_flight > 0:
                lag = max(now - before - self.interval_s, 0.0)
                self.lag_counts[min(int(lag / LAG_BUCKET_S), LAG_BUCKETS - 1)] += 1
                self.lag_max_s = max(self.lag_max_s, lag)
            if now - window_wall >= 1.0:
                cpu = time.process_time()
                share = (cpu - window_cpu) / (now - window_wall)
                self.cpu_share_sum += share
                self.cpu_share_max = max(self.cpu_share_max, share)
                self.cpu_windows += 1
                self.machine.sample(now - window_wall)
                window_wall, window_cpu = now, cpu

    def snapshot(self) -> dict[str, Any]:
        """Summary figures so far: CPU share mean/max, loop lag p50/p99 (to 0.1 ms) and max in
        seconds, how many samples lagged beyond `LAG_LIMIT_S`, and the process's role."""
        return {
            "role": self.role,
            "cpu_share_mean": self.cpu_share_sum / self.cpu_windows if self.cpu_windows else 0.0,
            "cpu_share_max": self.cpu_share_max,
            "loop_lag_p50_s": self._lag_quantile(0.5),
            "loop_lag_p99_s": self._lag_quantile(0.99),
            "loop_lag_max_s": self.lag_max_s,
            "samples": int(self.lag_counts.sum()),
            "loop_lag_over_limit": int(self.lag_counts[round(LAG_LIMIT_S / LAG_BUCKET_S):].sum()),
            **self.machine.snapshot(),
        }

    def _lag_quantile(self, q: float) -> float:
        """The upper edge of the bucket holding the `q` quantile (0 with no samples)."""
        cumulative = np.cumsum(self.lag_counts)
        if not cumulative[-1]:
            return 0.0
        bucket = int(np.searchsorted(cumulative, q * cumulative[-1], side="left"))
        return min((bucket + 1) * LAG_BUCKET_S, self.lag_max_s)


class MachineLoad:
    """Once a second: processes waiting to run, CPU steal, and this process's involuntary context
    switches (Linux's /proc/stat and psutil; elsewhere only the switches)."""

    def __init__(self) -> None:
        self.cores = os.cpu_count() or 1
        self.run_queue_max = 0
        self.steal_share_max = 0.0
        self.switches = 0
        self.seconds = 0.0
        self._process = psutil.Process()
        self._last_switches = self._process.num_ctx_switches().involuntary
        self._last_cpu = _cpu_jiffies()

    def sample(self, elapsed_s: float) -> None:
        switches = self._process.num_ctx_switches().involuntary
        self.switches += switches - self._last_switches
        self.seconds += elapsed_s
        self._last_switches = switches
        cpu = _cpu_jiffies()
        if cpu is not None and self._last_cpu is not None:
            total = sum(cpu[0]) - sum(self._last_cpu[0])
            if total > 0:
                self.steal_share_max = max(self.steal_share_max, (cpu[0][7] - self._last_cpu[0][7]) / total)
            self.run_queue_max = max(self.run_queue_max, cpu[1] - 1)  # less this process itself
        self._last_cpu = cpu

    def snapshot(self) -> dict[str, Any]:
        return {"cores": self.cores, "run_queue_max": self.run_queue_max, "steal_share_max": self.steal_share_max,
                "involuntary_switches_per_s": self.switches / self.seconds if self.seconds else 0.0}


def _cpu_jiffies() -> tuple[list[int], int] | None:
    """(the aggregate `cpu` line's jiffies, `procs_running`) from /proc/stat; None without it."""
    try:
        with open("/proc/stat", "rb") as stat:
            text = stat.read().decode()
    except OSError:
        return None
    jiffies, running = [], 0
    for line in text.splitlines():
        if line.startswith("cpu "):
            jiffies = [int(v) for v in line.split()[1:]] + [0] * 8
        elif line.startswith("procs_running"):
            running = int(line.split()[1])
    return jiffies, running
