"""`/metrics` in Prometheus text format, under the names of the server the simulator plays
(`--flavor`): SGLang's, vLLM's or llama.cpp's.

SGLang exports scheduler gauges (`sglang:num_running_reqs`, `sglang:spec_accept_length`, ...)
and tokenizer-manager counters and histograms (`sglang:prompt_tokens_total`,
`sglang:time_to_first_token_seconds`, ...), its generated tokens counted when a request finishes.
vLLM counts speculative drafts and accepted tokens and its prefix-cache queries and hits, and its
generated tokens as they are made. llama-server (`--metrics`) counts the prompt tokens it
computed and those it took from the cache apart, its drafts and accepted tokens, and has no TTFT
histogram and no count of requests. vLLM and llama-server count the accepted drafts per draft
position (label `position`, from 0), SGLang each finished request's verify steps. Each flavour's
names are the ones `loadlib/wire/flavours.py` reads. The simulator's own health, its scheduling lag against the simulated schedule, is exported
under `loadlib_sim:` whatever the flavour, because no server has such a metric.
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
    """The page of the flavour the engine's server plays (`SimConfig.flavor`)."""
    cfg = engine.cfg
    model = f'model_name="{cfg.served_model_name}"'
    lines = PAGES[cfg.flavor](engine, model) + _simulator_lines(engine, model)
    return ("\n".join(lines) + "\n").encode()


def _family(kind: str, rows: list[tuple[str, str, float]], labels: str) -> list[str]:
    """HELP, TYPE and one sample (`labels` may be empty) of each (name, doc, value) row."""
    out: list[str] = []
    for name, doc, value in rows:
        sample = f"{name}{{{labels}}} {value}" if labels else f"{name} {value}"
        out += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}", sample]
    return out


def _queued(engine: "Engine") -> int:
    return len(engine.waiting) + (1 if engine.chunked_pending else 0)


def _sglang(engine: "Engine", model: str) -> list[str]:
    cfg, stats = engine.cfg, engine.stats
    sched = f'{model},engine_type="unified",tp_rank="0",pp_rank="0"'
    lines = _family("gauge", [
        ("sglang:num_running_reqs", "The number of running requests.", len(engine.running)),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", _queued(engine)),
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
    ], sched)
    lines += _family("counter", [
        ("sglang:prompt_tokens_total", "Number of prefill tokens processed.", stats.prompt_tokens_total),
        ("sglang:generation_tokens_total", "Number of generation tokens processed.",
         stats.generation_tokens_total),
        ("sglang:cached_tokens_total", "Number of cached prompt tokens.", stats.cached_tokens_total),
        ("sglang:num_requests_total", "Number of requests processed.", stats.requests_total),
        ("sglang:num_aborted_requests_total", "Number of requests aborted.", stats.aborted_total),
        ("sglang:spec_verify_calls_total", "Number of speculative decoding verification calls.",
         stats.spec.verify_calls_total),
    ], model)
    for name, doc, hist in (
            ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
             stats.ttft),
            ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
             stats.e2e)):
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} histogram", *hist.lines(name, model)]
    return lines


def _vllm(engine: "Engine", model: str) -> list[str]:
    stats, spec = engine.stats, engine.stats.spec
    labels = f'engine="0",{model}'
    lines = _family("gauge", [
        ("vllm:num_requests_running", "Number of requests in model execution batches.", len(engine.running)),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", _queued(engine)),
        ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
         engine.radix.size_tokens / engine.cfg.radix_cache_tokens),
    ], labels)
    lines += _family("counter", [
        ("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
         stats.prompt_tokens_total),
        ("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
         stats.cached_tokens_total),
        ("vllm:prompt_tokens_total", "Number of prefill tokens processed.", stats.prompt_tokens_total),
        ("vllm:generation_tokens_total", "Number of generation tokens processed.", stats.generated_tokens_made),
        ("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", spec.drafts_total),
        ("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", spec.draft_tokens_total),
        ("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", spec.accepted_total),
    ], labels)
    lines += _per_position("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                           spec.accepted_per_position, labels + ",")
    name = "vllm:request_success_total"
    lines += [f"# HELP {name} Count of successfully processed requests.", f"# TYPE {name} counter",
              f'{name}{{{labels},finished_reason="stop"}} {stats.requests_total}']
    for name, doc, hist in (
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", stats.ttft),
            ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", stats.e2e)):
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} histogram", *hist.lines(name, labels)]
    return lines


def _llamacpp(engine: "Engine", model: str) -> list[str]:
    stats, spec = engine.stats, engine.stats.spec
    return _family("counter", [
        ("llamacpp:prompt_tokens_total", "Number of prompt tokens processed.",
         stats.prompt_tokens_total - stats.cached_tokens_total),
        ("llamacpp:prompt_tokens_cached_total", "Number of prompt tokens taken from the cache.",
         stats.cached_tokens_total),
        ("llamacpp:tokens_predicted_total", "Number of generation tokens processed.", stats.generation_tokens_total),
        ("llamacpp:n_decode_total", "Total number of llama_decode() calls.",
         stats.prefill_steps_total + stats.batch_steps_total),
        ("llamacpp:spec_decode_num_drafts_total", "Number of speculative decoding drafts.", spec.drafts_total),
        ("llamacpp:spec_decode_num_draft_tokens_total", "Number of draft tokens.", spec.draft_tokens_total),
        ("llamacpp:spec_decode_num_accepted_tokens_total", "Number of accepted draft tokens.",
         spec.accepted_total),
    ], "") + _family("gauge", [
        ("llamacpp:requests_processing", "Number of requests processing.", len(engine.running)),
        ("llamacpp:requests_deferred", "Number of requests deferred.", _queued(engine)),
    ], "") + _per_position("llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
                           "Accepted tokens per draft position", spec.accepted_per_position, "")


def _per_position(family: str, doc: str, counts: list[int], labels: str) -> list[str]:
    """A counter with one series per draft position (label `position`, from 0): vLLM's
    (v1/spec_decode/metrics.py, prometheus_client adds `_total` to the samples) and llama-server's
    (server-task.cpp: its family already ends in `_total`, and is left out before the first draft)."""
    if not counts:
        return []
    sample = family if family.endswith("_total") else f"{family}_total"
    return [f"# HELP {family} {doc}", f"# TYPE {family} counter",
            *(f'{sample}{{{labels}position="{position}"}} {n}' for position, n in enumerate(counts))]


PAGES = {"sglang": _sglang, "vllm": _vllm, "llamacpp": _llamacpp}  # flavour name -> its /metrics lines


def _simulator_lines(engine: "Engine", model: str) -> list[str]:
    stats = engine.stats
    lines = _family("counter", [
        ("loadlib_sim:prefill_steps_total", "Prefill steps (chunks of chunked prefill) run.", stats.prefill_steps_total),
        ("loadlib_sim:verify_steps_total", "Verify (decode) steps run, one per batch.", stats.batch_steps_total),
    ], model)
    lag = engine.recent_lag()
    name = "loadlib_sim:scheduling_lag_seconds"
    lines += [f"# HELP {name} How late the simulator's step loop woke up against its own schedule "
              f"(steps of the last few seconds).",
              f"# TYPE {name} summary",
              f'{name}{{{model},quantile="0.5"}} {quantile(lag, 0.5)}',
              f'{name}{{{model},quantile="0.99"}} {quantile(lag, 0.99)}',
              f'{name}{{{model},quantile="1.0"}} {max(lag, default=0.0)}',
              f"{name}_sum{{{model}}} {stats.lag_sum}",
              f"{name}_count{{{model}}} {stats.steps_total}"]
    return lines
