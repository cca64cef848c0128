"""Locust users that run assigned requests, and the per-process mailbox that feeds them.

Users are thin: take an assignment, wait for its start time, send it, report the record.
Every measurement leaves through Locust's one door, `events.request.fire`, so the live stats
(headless and web UI) show per scenario: the request (total time, failures with their reason),
TTFT in ms, decode in t/s and tok/chunk (the last two in the response-time column).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Callable

import gevent
from gevent.queue import Queue
from locust import User, constant, task
from locust.env import Environment

from loadlib import metrics
from loadlib.cache import observed_state
from loadlib.client import ChatClient, ChatSettings
from loadlib.protocol import Assignment
from loadlib.records import RequestRecord

_user_numbers = itertools.count()

REQUEST_TYPE = "CHAT"
TTFT_TYPE = "TTFT ms"
DECODE_TYPE = "DECODE t/s"
TOK_PER_CHUNK_TYPE = "TOK/CHUNK"


class Mailbox:
    """Assignments waiting for a free user of this process, and where finished records go."""

    def __init__(self, report: Callable[[RequestRecord], None], settings: ChatSettings) -> None:
        self.queue: Queue = Queue()
        self.report = report
        self.settings = settings

    def post(self, assignments: list[Assignment]) -> None:
        for assignment in assignments:
            self.queue.put(assignment)


def mailbox_of(environment: Environment) -> Mailbox:
    mailbox = getattr(environment, "uni_mailbox", None)
    if mailbox is None:
        raise RuntimeError("the uni-bench session was not set up (import loadlib.session in the locustfile)")
    return mailbox


def fire_request_events(environment: Environment, record: RequestRecord) -> None:
    """Reports one record to Locust's stats: the request itself plus its protocol figures."""
    if record.case in metrics.CONCURRENT_CASES:
        name = record.cell
    elif record.case == metrics.SINGLE_CASE:
        name = record.scenario
    else:  # a free-running cell mixes scenarios
        name = f"{record.cell}: {record.scenario}"
    fire = environment.events.request.fire
    total_ms = (record.total_s or 0.0) * 1000.0
    exception = RuntimeError(record.error) if record.error else None
    fire(request_type=REQUEST_TYPE, name=name, response_time=total_ms,
         response_length=record.completion_tokens or 0, exception=exception, context={},
         url=None, response=None, start_time=record.sent_at)
    if record.error:
        return
    comp, ttft, total = record.completion_tokens, record.ttft_s, record.total_s
    fire(request_type=TTFT_TYPE, name=name, response_time=ttft * 1000.0, response_length=0,
         exception=None, context={}, url=None, response=None, start_time=record.sent_at)
    if total > ttft:  # a short answer can arrive in the same read as its first token
        fire(request_type=DECODE_TYPE, name=name, response_time=metrics.decode_tps(comp, ttft, total),
             response_length=0, exception=None, context={}, url=None, response=None,
             start_time=record.sent_at)
    if record.chunks:
        fire(request_type=TOK_PER_CHUNK_TYPE, name=name,
             response_time=metrics.tok_per_chunk(comp, record.chunks), response_length=0,
             exception=None, context={}, url=None, response=None, start_time=record.sent_at)


class AssignedUser(User):
    """Runs whatever the driver assigns: one request at a time, at its start time.

    An assignment taken after its start time waited for a free user: the record keeps that
    client-side wait as `queue_s` (send time minus scheduled start), apart from TTFT.
    """

    abstract = True
    wait_time = constant(0)

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.mailbox = mailbox_of(environment)
        self.client = ChatClient(self.host or environment.host or "", self.mailbox.settings)
        runner = environment.runner
        self.worker_index = max(getattr(runner, "worker_index", 0), 0)
        self.user_number = next(_user_numbers)

    def on_start(self) -> None:
        self.client.connection.connect()

    def on_stop(self) -> None:
        self.client.close()

    @task
    def run_assignment(self) -> None:
        assignment: Assignment = self.mailbox.queue.get()
        delay = assignment.start_at - time.time()
        if delay > 0:
            gevent.sleep(delay)
        tag = dataclasses.replace(assignment.tag, worker=self.worker_index, user=self.user_number)
        watch = self.environment.uni_selfwatch
        watch.in_flight += 1
        try:
            record = self.client.chat(assignment.body, tag, assignment.request_id)
        finally:
            watch.in_flight -= 1
        if record.sent_at:
            record.queue_s = max(record.sent_at - assignment.start_at, 0.0)
        record.cache_intended, record.measured, record.turn = (assignment.cache_intended, assignment.measured,
                                                               assignment.turn)
        record.cache_observed = observed_state(record.cached_tokens)
        self.mailbox.report(record)
        fire_request_events(self.environment, record)
