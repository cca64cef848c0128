"""Live counters: what streams in flight did, seen while they stream, through the real client."""

from __future__ import annotations

import gevent
import pytest

from loadlib.figures import live
from loadlib.figures.live import TTFT_BUFFER, LiveCounters
from loadlib.sim.process import start_simulator
from loadlib.wire.client import ChatClient, ChatSettings, chat_body

STREAMS = 4


@pytest.fixture(scope="module")
def sim():
    with start_simulator(["--time-scale", "0.2", "--max-running-requests", str(STREAMS)]) as process:
        yield process


def run_streams(url: str, counters: LiveCounters | None, streams: int = STREAMS,
                max_tokens: int = 200) -> tuple[list, list[dict]]:
    """Runs `streams` requests at once; returns their records and a snapshot every 20 ms."""
    settings = ChatSettings(model="sim", max_tokens=max_tokens, timeout_s=30)
    clients = [ChatClient(url, settings, live_counters=counters) for _ in range(streams)]
    for client in clients:
        client.connection.connect()
    prompt = [{"role": "user", "content": "Write a Python function that merges two sorted lists."}]
    jobs = [gevent.spawn(client.stream, chat_body(settings, prompt), f"live-{i}")
            for i, client in enumerate(clients)]
    snapshots = []
    source = counters if counters is not None else live.COUNTERS
    while not all(job.ready() for job in jobs):
        gevent.sleep(0.02)
        snapshots.append(source.snapshot_and_reset())
    snapshots.append(source.snapshot_and_reset())
    for client in clients:
        client.close()
    return [job.get() for job in jobs], snapshots


@pytest.mark.processes
def test_streams_in_flight_chunks_and_first_tokens_show_before_any_request_ends(sim):
    counters = LiveCounters()
    records, snapshots = run_streams(sim.url, counters)
    assert all(r.error is None for r in records)
    streaming = [s for s in snapshots if s["finished"] == 0 and s["chunks"] > 0]
    assert streaming, "no snapshot saw chunks while every stream was still running"
    assert max(s["in_flight"] for s in streaming) == STREAMS
    assert sum(s["first_tokens"] for s in snapshots if s["finished"] == 0) >= 1
    ttfts = sorted(t for s in snapshots for t in s["ttfts_s"])
    assert ttfts == pytest.approx(sorted(r.ttft_s for r in records))


@pytest.mark.processes
def test_totals_over_the_snapshots_match_the_records(sim):
    counters = LiveCounters()
    records, snapshots = run_streams(sim.url, counters)
    assert sum(s["chunks"] for s in snapshots) == sum(r.chunks for r in records)
    assert sum(s["completion_tokens"] for s in snapshots) == sum(r.completion_tokens for r in records)
    assert sum(s["completion_chunks"] for s in snapshots) == sum(r.chunks for r in records)
    assert sum(s["finished"] for s in snapshots) == STREAMS
    assert sum(s["failed"] for s in snapshots) == 0
    assert snapshots[-1]["in_flight"] == 0
    assert all(s["interval_s"] >= 0 for s in snapshots)


@pytest.mark.processes
def test_a_failed_request_counts_as_ended_and_failed_without_usage_tokens(sim):
    counters = LiveCounters()
    client = ChatClient(sim.url, ChatSettings(model="sim", timeout_s=30), live_counters=counters)
    body = chat_body(client.settings, [{"role": "user", "content": "hi"}], max_tokens=1)
    record = client.stream(body, "one-token")  # comp <= 1: a failure
    client.close()
    snapshot = counters.snapshot_and_reset()
    assert record.error == "completion_tokens <= 1"
    assert (snapshot["in_flight"], snapshot["finished"], snapshot["failed"]) == (0, 1, 1)
    assert (snapshot["completion_tokens"], snapshot["completion_chunks"]) == (1, record.chunks)


@pytest.mark.processes
def test_clients_update_the_process_counters_by_default(sim):
    live.COUNTERS.snapshot_and_reset()
    records, snapshots = run_streams(sim.url, None, streams=2, max_tokens=20)
    assert sum(s["finished"] for s in snapshots) == 2
    assert sum(s["chunks"] for s in snapshots) == sum(r.chunks for r in records)


def test_a_snapshot_starts_a_new_interval_and_the_ttft_buffer_is_bounded():
    counters = LiveCounters()
    counters.stream_started()
    for i in range(TTFT_BUFFER + 10):
        counters.first_token(i * 1e-3)
    first = counters.snapshot_and_reset()
    assert first["first_tokens"] == TTFT_BUFFER + 10 and len(first["ttfts_s"]) == TTFT_BUFFER
    assert first["ttfts_s"][0] == pytest.approx(10e-3)  # the oldest are the ones dropped
    second = counters.snapshot_and_reset()
    assert (second["in_flight"], second["first_tokens"], second["ttfts_s"], second["chunks"]) == (1, 0, [], 0)
