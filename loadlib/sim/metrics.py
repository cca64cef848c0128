"""`/metrics` in Prometheus text format, with SGLang's metric names where SGLang has one.

SGLang exports scheduler gauges (`sglang:num_running_reqs`, `sglang:spec_accept_length`, ...)
and tokenizer-manager counters and histograms (`sglang:prompt_tokens_total`,
`sglang:time_to_first_token_seconds`, ...). The simulator's own health, its scheduling lag
against the simulated schedule, is exported under `loadlib_sim:` because SGLang has no such metric.
Text is rendered by hand: several instances live in one process, so a global registry won't do.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadlib.sim.engine import Engine

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                   5.0, 7.5, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0)


class Histogram:
    """Cumulative-bucket histogram, observed from the request path."""

    __slots__ = ("buckets", "counts", "total", "count")

    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out, running = [], 0
        for bound, n in zip(self.buckets, self.counts):
            running += n
            out.append(f'{name}_bucket{{{labels},le="{bound}"}} {running}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


def quantile(samples: list[float], q: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def render(engine: "Engine") -> bytes:
    cfg, stats = engine.cfg, engine.stats
    model = f'model_name="{cfg.served_model_name}"'
    sched = f'{model},engine_type="unified",tp_rank="0",pp_rank="0"'
    lag = engine.recent_lag()
    gauges = [
        ("sglang:num_running_reqs", "The number of running requests.", len(engine.running)),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
         len(engine.waiting) + (1 if engine.chunked_pending else 0)),
        ("sglang:num_used_tokens", "The number of used tokens.", engine.radix.size_tokens),
        ("sglang:token_usage", "The token usage.", engine.radix.size_tokens / cfg.radix_cache_tokens),
        ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.",
         cfg.radix_cache_tokens),
        ("sglang:gen_throughput", "The generation throughput (token/s).", engine.gen_throughput()),
        ("sglang:cache_hit_rate", "The prefix cache hit rate.", stats.cache_hit_rate),
        ("sglang:spec_accept_length", "The average acceptance length of speculative decoding.",
         stats.spec.accept_length),
        ("sglang:spec_accept_rate", "The average acceptance rate of speculative decoding "
         "(`accepted tokens / total draft tokens` in batch).", stats.spec.accept_rate),
    ]
    lines: list[str] = []
    for name, doc, value in gauges:
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", f"{name}{{{sched}}} {value}"]
    counters = [
        ("sglang:prompt_tokens_total", "Number of prefill tokens processed.", stats.prompt_tokens_total),
        ("sglang:generation_tokens_total", "Number of generation tokens processed.",
         stats.generation_tokens_total),
        ("sglang:cached_tokens_total", "Number of cached prompt tokens.", stats.cached_tokens_total),
        ("sglang:num_requests_total", "Number of requests processed.", stats.requests_total),
        ("sglang:num_aborted_requests_total", "Number of requests aborted.", stats.aborted_total),
    ]
    for name, doc, value in counters:
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} counter", f"{name}{{{model}}} {value}"]
    for name, doc, hist in (
            ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
             stats.ttft),
            ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
             stats.e2e)):
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} histogram", *hist.lines(name, model)]
    for name, doc, value in (
            ("loadlib_sim:prefill_steps_total", "Prefill steps (chunks of chunked prefill) run.",
             stats.prefill_steps_total),
            ("loadlib_sim:verify_steps_total", "Verify (decode) steps run, one per batch.",
             stats.batch_steps_total)):
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} counter", f"{name}{{{model}}} {value}"]
    name = "loadlib_sim:scheduling_lag_seconds"
    lines += [f"# HELP {name} How late the simulator's step loop woke up against its own schedule "
              f"(steps of the last few seconds).",
              f"# TYPE {name} summary",
              f'{name}{{{model},quantile="0.5"}} {quantile(lag, 0.5)}',
              f'{name}{{{model},quantile="0.99"}} {quantile(lag, 0.99)}',
              f'{name}{{{model},quantile="1.0"}} {max(lag, default=0.0)}',
              f"{name}_sum{{{model}}} {stats.lag_sum}",
              f"{name}_count{{{model}}} {stats.steps_total}"]
    return ("\n".join(lines) + "\n").encode()
