"""Locust's workers, seen from its master (`WorkerUsers`), and what becomes of a worker that dies.

The master sends each test's `RunConfig` and the load mode's announcements to every worker, and
each rounds stream to one worker (round-robin over the workers' users, so N streams spread like
Locust spreads users), remembering which worker holds which request. Workers send their records
back in batches (`loadlib.run.runtime.WorkerSink`), with how many requests they have in flight.

A worker that dies (Locust marks it missing once its heartbeats stop) is said at once, in one
line and in the manifest (`lost_workers`): which worker, when, the users it ran and the requests
it had in flight. Each request it held for a round becomes a failed record, so the round ends
at once instead of at its timeout. When the locustfile plays a load mode, the lost users are
spawned again on the other workers (what Locust's `--enable-rebalancing` does); with the
locustfile's own users Locust's own rule stands. When no worker is left, the run stops.
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any, Callable

import gevent
import numpy as np
from locust.env import Environment
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_SPAWNING, MasterRunner

from loadlib.modes import Assignment
from loadlib.records import RequestRecord
from loadlib.run.clock_sync import ClockOffsets
from loadlib.run.config import RunConfig
from loadlib.run.processes import LostWorker, UserProcesses
from loadlib.run.runtime import (ASSIGN_MESSAGE, CONFIG_MESSAGE, DRAIN_MESSAGE, DRAINED_MESSAGE, FLUSH_S, MODE_MESSAGE,
                                 PID_MESSAGE, RECORDS_MESSAGE)
from loadlib.run.selfwatch import SelfWatch
from loadlib.run.shared_resampling import SharedResampling
from loadlib.run.users import fire_request_event
from loadlib.scenarios.base import stats_name

log = logging.getLogger("uni-bench")

SELFWATCH_KEY = "uni_selfwatch"  # a worker's self-watch figures (and its pid) in Locust's worker report
WORKER_LOST = "worker lost: its process ended before the request's record came back"
FINAL_BATCHES_WAIT_S = 5.0  # how long the end waits for the workers' last records (requests still in flight)
CHECK_S = 1.0


class WorkerUsers(UserProcesses):
    lead_time_s = 0.25
    settle_s = FLUSH_S + 0.2  # a worker's count of requests in flight comes with its batches

    def __init__(self, environment: Environment, take_lines: Callable[[bytes], None],
                 take_record: Callable[[RequestRecord], None], add_live: Callable[[str, dict[str, Any]], None],
                 stop: Callable[[str], None], respawn_lost_users: bool) -> None:
        super().__init__(environment)
        self.runner: MasterRunner = environment.runner
        self._take_lines, self._take_record, self._add_live, self._stop = take_lines, take_record, add_live, stop
        self.respawn_lost_users = respawn_lost_users
        self.master_watch = SelfWatch(role="master")
        self.held: dict[str, tuple[str, Assignment]] = {}  # request id -> (worker id, assignment)
        self.in_flight_by_worker: dict[str, int] = {}
        self.selfwatch_by_worker: dict[str, dict[str, Any]] = {}
        self.pid_by_worker: dict[str, int] = {}
        self._drained: set[str] = set()
        self._users_by_worker: dict[str, int] = {}
        self._watcher: gevent.Greenlet | None = None
        self._testing = False  # between begin and end: a worker lost then is the test's loss
        self.clocks = ClockOffsets(self.runner)
        self.resampling = SharedResampling(self.runner, lambda: [worker for worker, _users in self._alive_workers()])
        self._workers: tuple[str, ...] = ()  # the test's workers in share order (its records' `worker`)
        self.runner.register_message(RECORDS_MESSAGE, self._on_records)
        self.runner.register_message(DRAINED_MESSAGE, lambda msg, **_: self._drained.add(msg.node_id))
        self.runner.register_message(PID_MESSAGE, lambda msg, **_: self.pid_by_worker.__setitem__(msg.node_id, msg.data))
        environment.events.worker_report.add_listener(self._on_report)

    def worker_ids(self) -> tuple[str, ...]:
        return tuple(dispatch_order(list(self.runner.clients)))

    def begin(self, config: RunConfig) -> None:
        self.held, self.in_flight_by_worker, self.lost = {}, {}, []
        self.clocks.begin()
        self.resampling.begin()
        self._workers, measured = config.workers, self.clocks.counts()
        self.runner.send_message(CONFIG_MESSAGE, config.to_message())
        self.clocks.wait(config.workers, measured)  # each worker measures its clock on the configuration
        self.master_watch.start()
        self._testing = True
        if self._watcher is None:
            self._watcher = gevent.spawn(self._watch)

    def announce(self, message: dict[str, Any]) -> None:
        self.runner.send_message(MODE_MESSAGE, message)

    def dispatch(self, assignments: list[Assignment]) -> None:
        order = round_robin(self._live_workers())
        if not order:
            for assignment in assignments:
                self._take_lost(assignment, "no worker with users to run it")
            return
        shares: dict[str, list[dict[str, Any]]] = {}
        for assignment in assignments:  # a stream (slot) always goes to the same worker
            worker_id = order[assignment.label.slot % len(order)]
            self.held[assignment.request_id] = (worker_id, assignment)
            shares.setdefault(worker_id, []).append(assignment.to_message())
        for worker_id, messages in shares.items():
            self.runner.send_message(ASSIGN_MESSAGE, messages, client_id=worker_id)

    def settle(self, request_id: str) -> None:
        self.held.pop(request_id, None)

    def streams_in_flight(self) -> int:
        live = {node.id for node in self.runner.clients.values() if node.state != STATE_MISSING}
        return sum(n for worker, n in self.in_flight_by_worker.items() if worker in live)

    def selfwatch(self) -> list[dict[str, Any]]:
        master = {**self.master_watch.snapshot(), "role": "master"}
        if any(self.resampling.shard_counts.values()):
            master["resample_shards_drawn"] = dict(self.resampling.shard_counts)
        return [*self.selfwatch_by_worker.values(), master]

    def resample(self, ttft: np.ndarray, decode: np.ndarray, meets: np.ndarray, ttft_q: float, decode_q: float,
                 seed: int) -> np.ndarray:
        """Drawn by the workers, idle while a level is judged (`loadlib.run.shared_resampling`)."""
        return self.resampling(ttft, decode, meets, ttft_q, decode_q, seed)

    def clock_offsets(self) -> list[dict[str, Any]]:
        return self.clocks.described(self._workers)

    def end(self) -> None:
        """Asks every worker still alive for its last records, and waits (bounded) until each has
        sent them: a worker answers once its requests in flight have ended (at once after a
        rounds run, whose driver waited for every record)."""
        self._testing = False
        self.master_watch.stop()
        self._drained = set()
        for worker_id in self._alive():
            self.runner.send_message(DRAIN_MESSAGE, None, client_id=worker_id)
        deadline = time.time() + FINAL_BATCHES_WAIT_S + 1.0
        while time.time() < deadline and self._alive() - self._drained:
            gevent.sleep(0.02)

    def _take_lost(self, assignment: Assignment, reason: str) -> None:
        """The failed record of a request a lost worker held (or no worker could take): counted
        by Locust too, and kept."""
        record = RequestRecord.lost(assignment.label, assignment.body, assignment.request_id, reason)
        fire_request_event(self.environment, record, stats_name(record.case, record.cell, record.scenario))
        self._take_record(record)

    def _alive(self) -> set[str]:
        return {node.id for node in self.runner.clients.values() if node.state != STATE_MISSING}

    # --- what the workers send ----------------------------------------------------------------

    def _on_records(self, msg: Any, **_kwargs: Any) -> None:
        """A worker's batch of records (JSON lines), how many requests it has in flight, and (once
        a second) the running figures of its streams."""
        self.in_flight_by_worker[msg.node_id] = msg.data["in_flight"]
        if msg.data.get("live") is not None:
            self._add_live(msg.node_id, msg.data["live"])
        self._take_lines(msg.data["lines"])

    def _on_report(self, client_id: str, data: dict[str, Any]) -> None:
        if SELFWATCH_KEY in data:
            self.selfwatch_by_worker[client_id] = data[SELFWATCH_KEY]

    # --- workers that die ---------------------------------------------------------------------

    def _live_workers(self) -> list[tuple[str, int]]:
        """(worker id, users) of the workers that can take streams now."""
        return [(worker, users) for worker, users in self._alive_workers() if users > 0]

    def _alive_workers(self) -> list[tuple[str, int]]:
        """(worker id, users) of the workers not missing."""
        return [(node.id, node.user_count) for node in self.runner.clients.values() if node.state != STATE_MISSING]

    def _watch(self) -> None:
        while True:
            gevent.sleep(CHECK_S)
            if not self._testing:
                continue
            for node in list(self.runner.clients.values()):
                if node.state != STATE_MISSING:
                    self._users_by_worker[node.id] = node.user_count
                elif node.id not in {lost.worker for lost in self.lost} and self._users_by_worker.get(node.id):
                    self._lose(node.id)

    def _lose(self, worker_id: str) -> None:
        """A worker's process is gone: say so, fail what it held, and carry on without it."""
        pid = self.pid_by_worker.get(worker_id)
        held = [(rid, assignment) for rid, (holder, assignment) in self.held.items() if holder == worker_id]
        in_flight = max(self.in_flight_by_worker.get(worker_id, 0), len(held))
        lost = LostWorker(worker_id, pid, time.time(), self._users_by_worker.get(worker_id, 0), in_flight,
                          keep_exit_status(pid) if pid else None)
        self.lost.append(lost)
        for rid, assignment in held:
            self.held.pop(rid, None)
            self._take_lost(assignment, WORKER_LOST)
        alive = [node for node in self.runner.clients.values() if node.state != STATE_MISSING]
        if not alive:
            log.error("%s; no worker is left: stopping", lost.said())
            self._stop(f"every worker was lost ({lost.said()})")
        elif self.respawn_lost_users and self.runner.state in (STATE_SPAWNING, STATE_RUNNING):
            log.warning("%s; its users are spawned again on the %d other worker(s)", lost.said(), len(alive))
            self.runner.start(self.runner.target_user_count, self.runner.spawn_rate)
        else:
            log.warning("%s; the other workers carry on with their own users (Locust's --enable-rebalancing "
                        "spawns the lost ones again)", lost.said())


def keep_exit_status(pid: int) -> str | None:
    """How the worker process `pid` ended, kept for Locust's own reaper.

    gevent (which Locust's `--processes` forks with) reaps its children itself and keeps each exit
    status for Locust's later `os.waitpid`, but only for 60 s after another child ends: a worker
    that died more than a minute before the run's end is then unknown to Locust's reaper, which
    logs thousands of `ChildProcessError` tracebacks and exits 1. The status is kept here for good.
    """
    import gevent.os

    children = getattr(gevent.os, "_watched_children", None)  # gevent's table: pid -> (pid, status, time)
    entry = children.get(pid) if isinstance(children, dict) else None
    if not isinstance(entry, tuple):
        return None
    children[pid] = (entry[0], entry[1], math.inf)
    code = os.waitstatus_to_exitcode(entry[1])
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


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
