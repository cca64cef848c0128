"""The wall clock every process of a run stamps and schedules by: the coordinating process's.

A run compares times taken in different processes: a round's streams start at one moment, a
free-running cell begins and ends at set times, a record's `sent_at` is set against the server's
scrapes and the other processes' records. On one host every process reads the same clock. A
worker on another host measures its clock's offset to the master's (`loadlib.run.clock_sync`)
and sets it here; from then on `now()` is the master's time, and `coordinator_time` turns a
stamp of this host's clock (the wire's `time.time()`, the kernel's receive stamps) into it.
Durations (a record's `*_s` fields) are differences of this host's stamps and need nothing.

Tests only: `UNI_LOCUST_TEST_CLOCK` shifts this process's clock as a host whose clock is off
would: "0.2" reads 200 ms ahead of the true time; "0.2,0.001" also gains 1 ms every second
from the process's start. A real run never sets it.
"""

from __future__ import annotations

import os
import time

TEST_CLOCK_ENV = "UNI_LOCUST_TEST_CLOCK"


def _test_shift() -> tuple[float, float]:
    """(shift in seconds, drift in seconds per second) from `UNI_LOCUST_TEST_CLOCK`."""
    raw = os.environ.get(TEST_CLOCK_ENV, "").strip()
    if not raw:
        return 0.0, 0.0
    shift, _, drift = raw.partition(",")
    return float(shift), float(drift or 0.0)


_SHIFT_S, _DRIFT = _test_shift()
_ORIGIN = time.time()
_offset_s = 0.0  # the coordinator's clock minus this host's, as last measured (0: this is the coordinator)


def host_time(t: float | None = None) -> float:
    """This host's wall clock now, or its reading of the stamp `t` (taken with `time.time()` or by
    the kernel); the same as `time.time()` except under the test hook."""
    t = time.time() if t is None else t
    return t + _SHIFT_S + _DRIFT * (t - _ORIGIN) if _SHIFT_S or _DRIFT else t


def now() -> float:
    """The coordinating process's wall clock, read here."""
    return host_time() + _offset_s


def coordinator_time(t: float) -> float:
    """A stamp of this host's clock (`time.time()`, a kernel stamp) in the coordinator's clock."""
    return host_time(t) + _offset_s


def offset_s() -> float:
    return _offset_s


def set_offset(offset_s: float) -> None:
    """The coordinator's clock minus this host's, as just measured: `now()` follows it at once."""
    global _offset_s
    _offset_s = offset_s
