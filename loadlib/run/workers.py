"""Assignments to Locust workers, and what becomes of them when a worker disappears.

In `--processes`/distributed mode the master sends each stream to a worker (round-robin over the
workers' users, so N streams spread like Locust spreads users) and remembers which worker holds
which request. A worker that dies takes its in-flight requests with it: the watch notices the
worker is gone (Locust marks it missing after its heartbeats stop) and reports each of those
requests as a failed record, so the round ends at once instead of at its timeout, and the run
says what it lost instead of silently counting fewer requests.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import gevent
from locust.runners import STATE_MISSING, MasterRunner

from loadlib.modes import Assignment
from loadlib.records import RequestRecord

log = logging.getLogger("uni-bench")

ASSIGN_MESSAGE = "uni:assign"
WORKER_LOST = "worker lost: its process ended before the request's record came back"


class WorkerDispatch:
    def __init__(self, runner: MasterRunner, report: Callable[[RequestRecord], None],
                 check_interval_s: float = 1.0) -> None:
        self.runner = runner
        self.report = report
        self.check_interval_s = check_interval_s
        self.held: dict[str, tuple[str, Assignment]] = {}  # request id -> (worker id, assignment)
        self._greenlet: gevent.Greenlet | None = None

    def live_workers(self) -> list[tuple[str, int]]:
        """(worker id, users) of the workers that can take streams now."""
        return [(node.id, node.user_count) for node in self.runner.clients.values()
                if node.user_count > 0 and node.state != STATE_MISSING]

    def dispatch(self, assignments: list[Assignment]) -> None:
        order = round_robin(self.live_workers())
        if not order:
            for assignment in assignments:
                self.report(lost_record(assignment, "no worker with users to run it"))
            return
        shares: dict[str, list[dict[str, Any]]] = {}
        for assignment in assignments:  # a stream (slot) always goes to the same worker
            worker_id = order[assignment.tag.slot % len(order)]
            self.held[assignment.request_id] = (worker_id, assignment)
            shares.setdefault(worker_id, []).append(assignment.to_message())
        for worker_id, messages in shares.items():
            self.runner.send_message(ASSIGN_MESSAGE, messages, client_id=worker_id)
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._watch)

    def settle(self, request_id: str) -> None:
        """A record came back: its worker no longer holds it."""
        self.held.pop(request_id, None)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _watch(self) -> None:
        while True:
            gevent.sleep(self.check_interval_s)
            live = {worker_id for worker_id, _users in self.live_workers()}
            lost = [(rid, assignment) for rid, (worker_id, assignment) in self.held.items()
                    if worker_id not in live]
            if lost:
                log.warning("%d request(s) lost with their worker", len(lost))
            for rid, assignment in lost:
                self.held.pop(rid, None)
                self.report(lost_record(assignment, WORKER_LOST))


def lost_record(assignment: Assignment, reason: str) -> RequestRecord:
    """The failed record of a request whose own record can never come."""
    tag = assignment.tag
    return RequestRecord(
        request_id=assignment.request_id, scenario=tag.scenario, cell=tag.cell,
        concurrency=tag.concurrency, case=tag.case, round=tag.round, slot=tag.slot,
        worker=-1, user=-1, sent_at=assignment.start_at, error=reason,
        max_tokens=assignment.body.get("max_tokens"), cache_intended=assignment.cache_intended,
        turn=assignment.turn, measured=assignment.measured,
    )


def round_robin(workers: list[tuple[str, int]]) -> list[str]:
    """Worker ids in the order streams go to them: one each in turn while they have users."""
    left = dict(workers)
    order: list[str] = []
    while any(left.values()):
        for worker_id, _count in workers:
            if left[worker_id]:
                order.append(worker_id)
                left[worker_id] -= 1
    return order
