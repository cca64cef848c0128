"""A capacity level's resamples drawn by the workers, which are idle while the master judges it.

The level's judgement resamples its requests 2000 times (`loadlib.figures.slo_resamples`): some
20 µs of CPU per request, which on the master came to a third of what it spent in a search. The
resamples come in shards, each from a generator seeded by the level and the shard, so a shard's
figures are the same wherever it is drawn. The master sends each worker still alive the level's
TTFT, decode and SLO-met arrays and the shards it is to draw (round-robin); each worker answers
shard by shard. A shard no worker answered within `ANSWER_WAIT_S`, or whose worker went missing,
the master draws itself: a lost worker costs time, never a figure. The master's self-watch counts
the shards each side drew (`shard_counts`).
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable

import gevent
import numpy as np
from gevent.event import Event
from locust.runners import MasterRunner, WorkerRunner

from loadlib.figures.slo_resamples import SHARDS, shard_statistics

RESAMPLE_MESSAGE = "uni:resample"  # master -> one worker: a level's arrays and the shards it is to draw
RESAMPLED_MESSAGE = "uni:resampled"  # worker -> master: {"job", "shard", "stats": 3 x size float64 bytes}
ANSWER_WAIT_S = 30.0  # the longest the master waits for the workers' shards before drawing the rest itself
POLL_S = 0.25  # how often the wait looks for a worker gone missing


class SharedResampling:
    """The master's side: a `slo_resamples.Resample` whose shards the workers `workers()` (the ids
    of those alive) draw."""

    def __init__(self, runner: MasterRunner, workers: Callable[[], list[str]]) -> None:
        self.runner, self.workers = runner, workers
        self._jobs = itertools.count(1)
        self._open: dict[int, tuple[dict[int, np.ndarray], Event]] = {}  # job -> (shard -> its statistics, all in)
        self.shard_counts = {"workers": 0, "master": 0}
        runner.register_message(RESAMPLED_MESSAGE, self._on_shard)

    def begin(self) -> None:
        """A test starts (the web UI's start again): its counts start at 0."""
        self.shard_counts = {"workers": 0, "master": 0}

    def __call__(self, ttft: np.ndarray, decode: np.ndarray, meets: np.ndarray, ttft_q: float, decode_q: float,
                 seed: int) -> np.ndarray:
        workers = self.workers()
        job = next(self._jobs)
        answers, complete = self._open[job] = {}, Event()
        held = {worker: list(range(i, SHARDS, len(workers))) for i, worker in enumerate(workers[:SHARDS])}
        arrays = {"ttft": np.asarray(ttft, dtype="float64").tobytes(),
                  "decode": np.asarray(decode, dtype="float64").tobytes(),
                  "meets": np.asarray(meets, dtype=bool).tobytes()}
        for worker, shards in held.items():
            self.runner.send_message(RESAMPLE_MESSAGE, {"job": job, "shards": shards, "ttft_q": ttft_q,
                                                        "decode_q": decode_q, "seed": seed, **arrays}, client_id=worker)
        deadline = time.monotonic() + ANSWER_WAIT_S
        while held and not complete.wait(POLL_S) and time.monotonic() < deadline:
            alive = set(self.workers())
            if any(worker not in alive and any(s not in answers for s in shards) for worker, shards in held.items()):
                break
        del self._open[job]
        parts = [answers[shard] if shard in answers else
                 shard_statistics(ttft, decode, meets, ttft_q, decode_q, seed, shard) for shard in range(SHARDS)]
        self.shard_counts["workers"] += len(answers)
        self.shard_counts["master"] += SHARDS - len(answers)
        return np.concatenate(parts, axis=1)

    def _on_shard(self, msg: Any, **_kwargs: Any) -> None:
        job = self._open.get(msg.data["job"])
        if job is None:  # a job already given up on
            return
        answers, complete = job
        answers[msg.data["shard"]] = np.frombuffer(msg.data["stats"], dtype="float64").reshape(3, -1)
        if len(answers) == SHARDS:
            complete.set()


def serve_resampling(runner: WorkerRunner) -> None:
    """A worker's side: draws the shards it is sent, one after another (letting its heartbeats
    through between them), and sends each back."""

    def draw(data: dict[str, Any]) -> None:
        ttft, decode = (np.frombuffer(data[key], dtype="float64") for key in ("ttft", "decode"))
        meets = np.frombuffer(data["meets"], dtype=bool)
        for shard in data["shards"]:
            stats = shard_statistics(ttft, decode, meets, data["ttft_q"], data["decode_q"], data["seed"], shard)
            runner.send_message(RESAMPLED_MESSAGE, {"job": data["job"], "shard": shard, "stats": stats.tobytes()})
            gevent.sleep(0)

    runner.register_message(RESAMPLE_MESSAGE, lambda msg, **_: gevent.spawn(draw, msg.data))
