"""A run whose first requests all fail the same way stops at once with the reason, instead of
measuring a wrong endpoint for minutes (`--keep-going` runs on regardless)."""

from __future__ import annotations

import logging
from typing import Any, Callable

import gevent
import orjson

from loadlib.records import RequestRecord
from loadlib.run.preflight import FIRST_REQUESTS, FirstFailures, answers_plain_http

log = logging.getLogger("uni-bench")


class EarlyStop:
    def __init__(self, host: str, stop: Callable[[str], None]) -> None:
        self.host = host
        self._stop = stop
        self.first = FirstFailures()

    def see(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            if not self.first.watching:
                return
            reason = self.first.see(record)
            if reason is not None:
                gevent.spawn(self._stop_with, reason)

    def see_record(self, record: RequestRecord) -> None:
        """A `RequestRecord` of this process's users; made a dict only while the first are watched."""
        if self.first.watching:
            self.see([record.to_dict()])

    def see_lines(self, lines: bytes) -> None:
        if self.first.watching:
            self.see([orjson.loads(line) for line in lines.split(b"\n")[:FIRST_REQUESTS]])

    def _stop_with(self, reason: str) -> None:
        """Stops the run with that reason, and a hint when an https:// target answers plain HTTP."""
        hint = ""
        if reason.startswith("TLS") and answers_plain_http(self.host):
            hint = " (the server answered plain HTTP: use http:// in --host)"
        said = f"the first {FIRST_REQUESTS} requests all failed: {reason}{hint}"
        log.error("stopping early: %s; --keep-going runs on regardless", said)
        self._stop(said)
