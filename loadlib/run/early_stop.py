"""A run stops early, with the reason, when going on would only measure failures:

- its first requests all fail the same way (a wrong endpoint), instead of measuring it for
  minutes;
- its server goes away: once a server has answered, `GONE_AFTER` requests in a row that fail at
  the connection (refused, reset, closed) make the run ask the server for `GET /v1/models`, and a
  server that answers nothing there for `PROBE_FOR_S` ends the run with the time it went away.
  A server that answers anything, an HTTP 503 or 429 included, is there: its failures are
  findings of the run, not a reason to end it (the simulator's injected faults are such answers).

`--keep-going` runs on regardless of both (a server restarted mid-run on purpose).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import gevent
import orjson

from loadlib.records import RequestRecord
from loadlib.run.preflight import FIRST_REQUESTS, FirstFailures, answers_plain_http, auth_hint, server_answer

log = logging.getLogger("uni-bench")

GONE_AFTER = 4  # connection failures in a row, none answered between them, before the server is probed
PROBE_FOR_S = 3.0  # how long a server that is probed may stay silent before the run ends
PROBE_EVERY_S = 0.5
CONNECTION_FAILURES = ("connect to ", "connect timeout", "connection refused", "connection reset",
                       "connection closed")  # `loadlib.wire.connection`'s reasons below HTTP


def connection_failure(error: str | None) -> bool:
    """Whether a failure reason says the connection itself failed (not an answer of the server)."""
    return error is not None and error.startswith(CONNECTION_FAILURES)


@dataclass
class Streak:
    """One server's connection failures in a row: how many, since when, the first reason."""

    count: int
    since: float
    reason: str


class ConnectionStreaks:
    """Per target, the connection failures in a row since the server last answered; `see` says
    when a target's streak reaches `count` (once per streak). A target that never answered has
    none: a server that was never there is the first requests' rule's, not this one's."""

    def __init__(self, count: int = GONE_AFTER) -> None:
        self.count = count
        self.answered: set[str] = set()
        self.streaks: dict[str, Streak] = {}

    def see(self, target: str, error: str | None, http_status: int | None, ended_at: float) -> bool:
        if connection_failure(error):
            if http_status:  # cut off mid-stream: the server was there when it answered
                self.answered.add(target)
            if target not in self.answered:
                return False
            streak = self.streaks.setdefault(target, Streak(0, ended_at, str(error)))
            streak.count += 1
            return streak.count == self.count
        if error is None or http_status:  # the server answered: whatever it said, it is there
            self.answered.add(target)
            self.streaks.pop(target, None)
        return False  # a timeout or a lost worker says nothing either way

    @property
    def active(self) -> bool:
        return bool(self.streaks)


class EarlyStop:
    """Sees every record of the run (`see_record`, `see_lines`) and stops the run by `stop(reason)`
    when one of the rules above says so; `url_of(target)` is a target's base URL, to probe."""

    def __init__(self, host: str, stop: Callable[[str], None], *,
                 url_of: Callable[[str], str] | None = None, api_key: str | None = None,
                 verify_tls: bool = True, started_at: float | None = None, targets: tuple[str, ...] = ("",)) -> None:
        self.host = host
        self._targets = frozenset(targets)  # the labels records carry ("" for a run of one server)
        self._stop = stop
        self.first = FirstFailures()
        self.streaks = ConnectionStreaks()
        self._url_of = url_of or (lambda target: host)
        self._api_key, self._verify_tls = api_key, verify_tls
        self._started_at = started_at if started_at is not None else time.time()
        self._probing: set[str] = set()
        self.stopped = False

    def see(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            if self.first.watching:
                reason = self.first.see(record)
                if reason is not None:
                    gevent.spawn(self._stop_with, reason)
            self._see_one(record.get("target") or "", record.get("error"), record.get("http_status"),
                          record["sent_at"] + (record.get("total_s") or 0.0))

    def see_record(self, record: RequestRecord) -> None:
        """A `RequestRecord` of this process's users; made a dict only while the first are watched."""
        if self.first.watching:
            self.see([record.to_dict()])
        else:
            self._see_one(record.target, record.error, record.http_status, record.sent_at + (record.total_s or 0.0))

    def see_lines(self, lines: bytes) -> None:
        """A worker's batch; only failed records are parsed, unless a streak may end in this batch or
        a target has not answered yet (its successes are what makes its later silence news)."""
        if not (self.first.watching or self.streaks.active or self._targets - self.streaks.answered):
            if lines.count(b'"error":null') == lines.count(b"\n") + 1:
                return  # every request of the batch succeeded: nothing to look at, record by record
            split = [line for line in lines.split(b"\n") if b'"error":null' not in line]
        else:
            split = lines.split(b"\n")
        if split:
            self.see([orjson.loads(line) for line in split])

    def _see_one(self, target: str, error: str | None, http_status: int | None, ended_at: float) -> None:
        if self.streaks.see(target, error, http_status, ended_at) and target not in self._probing:
            self._probing.add(target)
            gevent.spawn(self._probe, target)

    def _probe(self, target: str) -> None:
        """Asks the server whether it is there; ends the run if it stays silent for `PROBE_FOR_S`
        (at once when its port refuses the connection: nothing listens there any more)."""
        url = self._url_of(target)
        deadline = time.time() + PROBE_FOR_S
        try:
            while url and not self.stopped:
                silence = server_answer(url, self._api_key, self._verify_tls)
                if silence is None:
                    self.streaks.streaks.pop(target, None)  # it answers: its failures are findings
                    return
                if silence.endswith("connection refused") or time.time() >= deadline:
                    self._stop_gone(target, url, silence)
                    return
                gevent.sleep(PROBE_EVERY_S)
        finally:
            self._probing.discard(target)

    def _stop_gone(self, target: str, url: str, silence: str) -> None:
        streak = self.streaks.streaks.get(target)
        if streak is None or self.stopped:
            return
        server = f"{target} ({url})" if target else url
        said = (f"the server {server} went away {streak.since - self._started_at:.1f} s into the run "
                f"(at {time.strftime('%H:%M:%S', time.localtime(streak.since))}): {streak.count} requests in a row "
                f"failed at the connection (the first: {streak.reason}) and GET /v1/models gets no answer ({silence})")
        log.error("stopping early: %s; --keep-going runs on regardless", said)
        self.stopped = True
        self._stop(said)

    def _stop_with(self, reason: str) -> None:
        """Stops the run with that reason, and a hint where the reason points at one."""
        if self.stopped:
            return
        hint = ""
        if reason.startswith("TLS") and answers_plain_http(self.host):
            hint = " (the server answered plain HTTP: use http:// in --host)"
        elif reason.startswith(("http 401", "http 403")):
            hint = f" ({auth_hint(self._api_key)})"
        said = f"the first {FIRST_REQUESTS} requests all failed: {reason}{hint}"
        log.error("stopping early: %s; --keep-going runs on regardless", said)
        self.stopped = True
        self._stop(said)
