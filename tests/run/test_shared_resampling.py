"""A capacity level's resamples drawn in shards: by the workers over Locust's messages (here two
runners' message handlers wired to each other in one process), by the master for a worker that
is gone, and all here for the report: the same figures, to the bit, in every case."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import gevent
import numpy as np

from loadlib.figures.bootstrap import RESAMPLES
from loadlib.figures.slo_resamples import SHARDS, resampled_statistics, shard_size
from loadlib.run.shared_resampling import ANSWER_WAIT_S, SharedResampling, serve_resampling


class Runner:
    """The part of a Locust runner these use: handlers by message type, and a send that hands the
    message to the peer's handler (None: lost on the way)."""

    def __init__(self, node_id: str) -> None:
        self.node_id, self.handlers, self.peer, self.sent = node_id, {}, None, []

    def register_message(self, kind: str, handler: Any) -> None:
        self.handlers[kind] = handler

    def send_message(self, kind: str, data: Any, client_id: str | None = None) -> None:
        self.sent.append((kind, client_id))
        if self.peer is not None:
            message = SimpleNamespace(type=kind, data=data, node_id=self.node_id)
            gevent.spawn(self.peer.handlers[kind], message)


def level(n: int = 900, seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ttft = rng.lognormal(-2, 0.5, n)
    ttft[::37] = np.nan  # failures
    decode = rng.normal(80, 10, n)
    return ttft, decode, ttft < 0.15


def test_every_shard_drawn_by_a_worker_gives_the_figures_drawn_here():
    master, worker = Runner("master"), Runner("worker-1")
    master.peer, worker.peer = worker, master
    serve_resampling(worker)
    shared = SharedResampling(master, lambda: ["worker-1"])
    ttft, decode, meets = level()
    drawn = shared(ttft, decode, meets, 0.9, 0.1, seed=11)
    assert drawn.shape == (3, RESAMPLES)
    np.testing.assert_array_equal(drawn, resampled_statistics(ttft, decode, meets, 0.9, 0.1, 11))
    assert shared.shard_counts == {"workers": SHARDS, "master": 0}
    assert master.sent == [("uni:resample", "worker-1")]
    shared.begin()  # the next test (the web UI's start again) counts its own
    assert shared.shard_counts == {"workers": 0, "master": 0}


def test_shards_of_a_worker_gone_are_drawn_by_the_master_without_waiting_it_out():
    master = Runner("master")  # its message goes nowhere: the worker died with it
    alive = ["worker-1", "worker-2"]
    shared = SharedResampling(master, lambda: list(alive))
    gevent.spawn_later(0.3, alive.remove, "worker-2")
    gevent.spawn_later(0.3, alive.remove, "worker-1")
    ttft, decode, meets = level()
    started = time.monotonic()
    drawn = shared(ttft, decode, meets, 0.5, 0.1, seed=5)
    assert time.monotonic() - started < ANSWER_WAIT_S / 4
    np.testing.assert_array_equal(drawn, resampled_statistics(ttft, decode, meets, 0.5, 0.1, 5))
    assert shared.shard_counts == {"workers": 0, "master": SHARDS}
    assert sorted(client for _kind, client in master.sent) == ["worker-1", "worker-2"]


def test_the_shards_hold_every_resample_even_fewer_than_there_are_shards():
    assert sum(shard_size(shard) for shard in range(SHARDS)) == RESAMPLES
    assert [shard_size(shard, 5) for shard in range(SHARDS)] == [1] * 5 + [0] * (SHARDS - 5)
    ttft, decode, meets = level(40)
    assert resampled_statistics(ttft, decode, meets, 0.9, 0.1, 1, resamples=5).shape == (3, 5)
