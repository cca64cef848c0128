"""Live metrics for Prometheus: `--metrics-port PORT` serves `/metrics` while the run lasts.

Operators already watch their servers in Prometheus and Grafana; this puts the client's view
beside the server's. Everything comes from what the coordinating process (the local runner, or
the master) already has: each finished request's record (`loadlib.events.record`, which reaches
the master from every worker in their batches), and, read when Prometheus scrapes, the streams in
flight, users and workers that the workers' reports keep current. Nothing runs on the workers and
nothing per chunk: one record is a handful of histogram observations.

Only measured records count (warm-up, priming and calibration are left out, as from every
figure); latencies and rates are of the requests that succeeded; requests are counted by outcome
and failure reason, tokens wherever the server reported usage. Labels: `name` (the Locust stats
row), `cell`, `target` (an A/B run's server label, "" for the one server) and `run` (the run
directory's name). With the web UI the same page is also at `/uni/metrics` on its port.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

from flask import Response
from gevent.pywsgi import WSGIServer
from locust.env import Environment
from locust.runners import STATE_MISSING, MasterRunner
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, disable_created_metrics, generate_latest, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString
from prometheus_client.registry import Collector

from loadlib.figures import formulas
from loadlib.hooks import events
from loadlib.run.inputs import usage_error
from loadlib.scenarios.base import stats_name

if TYPE_CHECKING:
    from loadlib.run.config import RunConfig
    from loadlib.run.processes import UserProcesses

# Buckets fit for LLM serving: a cached TTFT takes milliseconds, a long answer minutes.
SECONDS_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0,
                   5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0)
GAP_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25,
               0.5, 1.0, 2.5, 5.0)
TPS_BUCKETS = (1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 400.0, 500.0,
               750.0, 1000.0, 1500.0, 2000.0, 3000.0, 5000.0)
log = logging.getLogger("uni-bench")

LABELS = ("name", "cell", "target", "run")
MAX_REASONS = 20  # distinct failure reasons kept as label values; the rest count as "other"
# ideal_cached: an agent session's turn's hash blocks an infinite prefix cache would hold
TOKEN_KINDS = ("prompt", "completion", "cached", "reasoning", "ideal_cached")


@dataclass(slots=True)
class RequestFigures:
    """One measured record's figures, in the units the exporters send (None: not defined for it)."""

    ok: bool
    reason: str  # the failure's kind ("" when ok)
    ttft_s: float | None
    ttfo_s: float | None
    chunk_gap_s: float | None
    total_s: float | None
    decode_tps: float | None
    tokens: tuple[int | None, ...]  # prompt, completion, cached, reasoning, ideal cached (`TOKEN_KINDS`)
    spec: tuple[int, int] | None = None  # the server's account: verify steps, accepted drafts (None: none sent)

    @property
    def session_hit_known(self) -> bool:
        """An agent session's answered turn whose cached tokens the server reported."""
        prompt, _completion, cached, _reasoning, ideal = self.tokens
        return self.ok and prompt is not None and cached is not None and ideal is not None


def failure_kind(error: str) -> str:
    """A failure reason's kind, for a label: its text up to the first colon ("http 503", "client
    error", "worker lost", "timeout mid-stream"). The full reasons stay in the records; a label
    holds few values, or Prometheus drowns in series."""
    return error.split(":", 1)[0].strip()[:60] or "error"


def figures_of(record: dict[str, Any]) -> RequestFigures:
    """The figures of one record (a measured one), with the protocol's formulas."""
    error = record.get("error")
    ok = error is None
    ttft, total, comp = record.get("ttft_s"), record.get("total_s"), record.get("completion_tokens")
    tokens = (record.get("prompt_tokens"), comp, record.get("cached_tokens"), record.get("reasoning_tokens"),
              record.get("ideal_cached_tokens") if ok else None)
    if not ok or ttft is None or total is None:
        return RequestFigures(ok, "" if ok else failure_kind(error), None, None, None, total if ok else None,
                              None, tokens)
    decode = formulas.decode_tps(comp, ttft, total) if comp is not None and total > ttft else None
    steps, accepted = record.get("spec_verify_steps"), record.get("spec_accepted_tokens")
    return RequestFigures(True, "", ttft, record.get("ttfo_s"),
                          formulas.chunk_gap_s(ttft, record.get("last_chunk_s"), record.get("chunks", 0)),
                          total, decode, tokens, (steps, accepted) if steps is not None and accepted is not None else None)


HISTOGRAMS = (  # (name, help, buckets) of the per-request histograms, in `RequestFigures` order
    ("uni_locust_ttft_seconds", "Time to first token (first content, reasoning or tool-call chunk), successful "
     "requests", SECONDS_BUCKETS),
    ("uni_locust_ttfo_seconds", "Time to the first answer token after the reasoning (thinking runs)", SECONDS_BUCKETS),
    ("uni_locust_chunk_gap_seconds", "Mean time between a stream's chunks after the first", GAP_BUCKETS),
    ("uni_locust_request_duration_seconds", "End-to-end latency, send to end of stream", SECONDS_BUCKETS),
    ("uni_locust_decode_tokens_per_second", "Decode rate per stream, (completion_tokens - 1) / (total - ttft)",
     TPS_BUCKETS),
)


BOUNDS = [[floatToGoString(bound) for bound in (*buckets, math.inf)] for _name, _help, buckets in HISTOGRAMS]
# each histogram's `le` values as Prometheus writes them, made once rather than at every scrape


class RunMetrics:
    """The Prometheus registry of one Locust process: the per-record series, and live gauges read
    at scrape time from `live` (a callable returning the run id and what is running now).

    A record only bumps plain counts (a few microseconds); the histograms and counters are built
    from them when Prometheus scrapes (`RecordCollector`), not kept in prometheus_client's locked
    objects on every request."""

    def __init__(self, live: Callable[[], "LiveState | None"]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.records = RecordCollector()
        self.registry.register(self.records)
        self.registry.register(_LiveCollector(live))

    def observe(self, record: dict[str, Any], run: str) -> None:
        """One finished request (called for every record; unmeasured ones are left out)."""
        if record.get("measured", True):
            key = (stats_name(record["case"], record["cell"], record["scenario"]), record["cell"],
                   record.get("target", ""), run)
            self.records.add(key, figures_of(record))


class RecordCollector(Collector):
    """Counts per (name, cell, target, run): each histogram's bucket counts and sum, requests by
    outcome and reason, tokens by kind; rendered as Prometheus families when scraped."""

    def __init__(self) -> None:
        self.histograms: dict[tuple[int, tuple[str, ...]], list[Any]] = {}  # (histogram, key) -> [counts, sum]
        self.requests: dict[tuple[str, ...], int] = {}  # key + (outcome, reason)
        self.tokens: dict[tuple[str, ...], int] = {}  # key + (kind,)
        self.session_hits: dict[tuple[str, ...], list[int]] = {}  # key -> agent sessions' [prompt, cached, ideal]
        self.spec: dict[tuple[str, ...], list[int]] = {}  # key -> [verify steps, accepted drafts]
        self._reasons: set[str] = set()

    def add(self, key: tuple[str, ...], figures: RequestFigures) -> None:
        if figures.ok:
            for index, value in enumerate((figures.ttft_s, figures.ttfo_s, figures.chunk_gap_s, figures.total_s,
                                           figures.decode_tps)):
                if value is not None:
                    buckets = HISTOGRAMS[index][2]
                    counts = self.histograms.get((index, key))
                    if counts is None:
                        counts = self.histograms[(index, key)] = [[0] * (len(buckets) + 1), 0.0]
                    counts[0][bisect.bisect_left(buckets, value)] += 1  # le: a value on a bound counts in it
                    counts[1] += value
        outcome = (*key, "ok", "") if figures.ok else (*key, "failed", self._reason(figures.reason))
        self.requests[outcome] = self.requests.get(outcome, 0) + 1
        for kind, count in zip(TOKEN_KINDS, figures.tokens):
            if count:
                self.tokens[(*key, kind)] = self.tokens.get((*key, kind), 0) + count
        if figures.session_hit_known:
            prompt, _completion, cached, _reasoning, ideal = figures.tokens
            sums = self.session_hits.setdefault(key, [0, 0, 0])
            sums[0], sums[1], sums[2] = sums[0] + prompt, sums[1] + cached, sums[2] + ideal
        if figures.spec is not None:
            counts = self.spec.setdefault(key, [0, 0])
            counts[0] += figures.spec[0]
            counts[1] += figures.spec[1]

    def _reason(self, kind: str) -> str:
        """The failure kind as a label value: the first `MAX_REASONS` kinds, then "other"."""
        if kind not in self._reasons and len(self._reasons) < MAX_REASONS:
            self._reasons.add(kind)
        return kind if kind in self._reasons else "other"

    def collect(self) -> Iterator[Any]:
        for index, (name, doc, _buckets) in enumerate(HISTOGRAMS):
            family = HistogramMetricFamily(name, doc, labels=LABELS)
            for (which, key), (counts, total) in self.histograms.items():
                if which == index:
                    family.add_metric(list(key), list(zip(BOUNDS[index], itertools.accumulate(counts))), total)
            yield family
        requests = CounterMetricFamily("uni_locust_requests", "Measured requests by outcome (ok, failed) and failure "
                                       "reason", labels=(*LABELS, "outcome", "reason"))
        for labels, count in self.requests.items():
            requests.add_metric(list(labels), count)
        tokens = CounterMetricFamily("uni_locust_tokens", "Tokens the server's usage reported, by kind (prompt, "
                                     "completion, cached, reasoning)", labels=(*LABELS, "kind"))
        for labels, count in self.tokens.items():
            tokens.add_metric(list(labels), count)
        hits = GaugeMetricFamily("uni_locust_session_prefix_hit_ratio", "Agent sessions: cached / prompt tokens of "
                                 "the answered turns, achieved (the server's usage) and ideal (an infinite prefix "
                                 "cache, from the trace's hash blocks)", labels=(*LABELS, "kind"))
        for key, (prompt, cached, ideal) in self.session_hits.items():
            if prompt:
                hits.add_metric([*key, "achieved"], cached / prompt)
                hits.add_metric([*key, "ideal"], ideal / prompt)
        yield from (requests, tokens, hits, *self._spec_families())

    def _spec_families(self) -> tuple[Any, ...]:
        steps = CounterMetricFamily("uni_locust_spec_verify_steps", "Verify steps of the server's account of each "
                                    "request's speculative decoding, summed", labels=LABELS)
        accepted = CounterMetricFamily("uni_locust_spec_accepted_tokens", "Accepted draft tokens of the server's "
                                       "account of each request, summed", labels=LABELS)
        length = GaugeMetricFamily("uni_locust_spec_accept_length", "Tokens per verify step, (accepted drafts + "
                                   "verify steps) / verify steps, over the requests so far (the server's account)",
                                   labels=LABELS)
        for key, (verify_steps, drafts) in self.spec.items():
            steps.add_metric(list(key), verify_steps)
            accepted.add_metric(list(key), drafts)
            if verify_steps:
                length.add_metric(list(key), float(formulas.accept_length(verify_steps, drafts)))
        return steps, accepted, length


@dataclass(frozen=True, slots=True)
class LiveState:
    run: str
    streams_in_flight: int
    users: int
    workers: int | None  # None: no workers (a local run)
    workers_lost: int
    energy: tuple[dict[str, Any], ...] = ()  # each ended cell's GPU energy rows (`figures.energy.json_rows`, with `target`)


ENERGY_GAUGES = (  # (name, help, row key) of each ended cell's energy per GPU
    ("uni_locust_gpu_energy_joules", "GPU energy over the cell (the meter's counter change, or its power integrated)",
     "joules"),
    ("uni_locust_gpu_mean_watts", "GPU mean power over the cell, joules / seconds", "mean_watts"),
    ("uni_locust_gpu_peak_watts", "GPU highest power sampled during the cell", "peak_watts"),
    ("uni_locust_gpu_tokens_per_joule", "Completion tokens of the cell's successful requests per joule", "tokens_per_joule"),
    ("uni_locust_gpu_joules_per_token", "Joules per completion token of the cell's successful requests", "joules_per_token"),
)


class _LiveCollector(Collector):
    """The gauges, read when Prometheus scrapes: nothing is kept up to date between scrapes."""

    def __init__(self, live: Callable[[], LiveState | None]) -> None:
        self.live = live

    def collect(self) -> Iterator[Any]:
        state = self.live()
        if state is None:
            return
        families = [GaugeMetricFamily("uni_locust_streams_in_flight", "Requests being sent and read now",
                                      labels=["run"]),
                    GaugeMetricFamily("uni_locust_users", "Locust users running now", labels=["run"])]
        families[0].add_metric([state.run], state.streams_in_flight)
        families[1].add_metric([state.run], state.users)
        if state.workers is not None:
            workers = GaugeMetricFamily("uni_locust_workers", "Locust workers connected and alive", labels=["run"])
            workers.add_metric([state.run], state.workers)
            lost = CounterMetricFamily("uni_locust_workers_lost", "Workers whose process ended during the run",
                                       labels=["run"])
            lost.add_metric([state.run], state.workers_lost)
            families += [workers, lost]
        latest = {(row["cell"], row["gpu"], row.get("target", "")): row for row in state.energy}  # a cell run again: its last
        for name, doc, key in ENERGY_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["cell", "gpu", "target", "run"])
            for row in latest.values():
                if row.get(key) is not None:
                    family.add_metric([row["cell"], row["gpu"], row.get("target", ""), state.run], row[key])
            families.append(family)
        yield from families


class RunNow(Protocol):
    """What the live exports read of the run's session (`loadlib.run.session.RunSession`)."""

    run_dir: Path | None  # None before the first test: its name labels every series
    users: UserProcesses | None  # the requests in flight, the workers lost
    config: RunConfig | None  # the test's model
    cell_energy: list[dict[str, Any]]  # each ended cell's GPU energy rows, with its target


def live_state(environment: Environment, session: RunNow | None) -> LiveState | None:
    """What is running now, from the run's session (None before the first test)."""
    if session is None or session.run_dir is None or session.users is None:
        return None
    runner = environment.runner
    workers = None
    if isinstance(runner, MasterRunner):
        workers = sum(1 for node in runner.clients.values() if node.state != STATE_MISSING)
    return LiveState(session.run_dir.name, session.users.streams_in_flight(), runner.user_count, workers,
                     len(session.users.lost), tuple(session.cell_energy))


def install(environment: Environment, session_of: Callable[[], RunNow | None]) -> RunMetrics | None:
    """With `--metrics-port`, on the coordinating process: the registry, its listener on every
    record, the endpoint (on `--web-host`'s interface) and the web UI's `/uni/metrics`. Called
    before anything starts, so that a port that cannot be bound is one line and exit code 2;
    `session_of` gives the run's session once there is one."""
    opts = environment.parsed_options
    port = getattr(opts, "metrics_port", None)
    if not port:
        return None
    disable_created_metrics()  # no `_created` series beside every counter and histogram: half the page
    metrics = RunMetrics(lambda: live_state(environment, session_of()))
    host = opts.web_host if opts.web_host not in ("", "*") else "0.0.0.0"  # Locust's "" and "*": every interface
    server = WSGIServer((host, port), make_wsgi_app(metrics.registry), log=None, error_log=None)
    try:
        server.init_socket()
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)  # gevent's strerror repeats the address
        usage_error(f"--metrics-port {port}: cannot listen on {host}:{port}: {reason}")
    server.start()
    log.info("Live metrics for Prometheus: http://%s:%d/metrics", host, port)
    events.record.add_listener(lambda record, **_: metrics.observe(record, session_of().run_dir.name))
    environment.events.quitting.add_listener(lambda **_: server.stop(timeout=1))
    _serve_in_web_ui(environment, metrics.registry)
    return metrics


def _serve_in_web_ui(environment: Environment, registry: CollectorRegistry) -> None:
    web_ui = environment.web_ui
    if web_ui is None:
        return
    base = getattr(environment.parsed_options, "web_base_path", None) or ""
    web_ui.app.add_url_rule(f"{base}/uni/metrics", "uni_metrics", web_ui.auth_required_if_enabled(
        lambda: Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)))
