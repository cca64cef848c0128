"""The server flavours the tool speaks to, as data: one frozen value per server.

A flavour is what one server is on the wire and at its endpoints: the delta keys its stream
carries text under, how its errors look (in a non-200 body and inside a stream), the names of its
Prometheus metrics, and the endpoints and fields that say which server it is and its version.
The client's stream reader, the probe, the server view and the simulator all read these values,
so a server's quirks are written down once. sglang-router speaks SGLang's wire and is told apart
by its server info.

Adding a server flavour: one `Flavour` here and its line in `FLAVOURS` (and an emitter in
`loadlib/sim/wire.py` if the simulator should speak it). Pure data: stdlib only, so that the
simulator can import it without the tool.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeltaKeys:
    """The keys of `choices[].delta` that carry text."""

    reasoning: str  # the thinking text (with a reasoning parser)
    content: str = "content"  # the answer


@dataclass(frozen=True)
class ErrorShape:
    """How an error looks. Inside a stream it is always an event `{"error": {...}}`."""

    fields: tuple[str, ...]  # the error object's keys, in the server's order
    nested_in_body: bool  # a non-200 body is `{"error": {...}}` (True) or the object itself (False)
    done_after_stream_error: bool  # `data: [DONE]` still follows an error event


# How a server keeps its running/queued gauges, which decides what a scrape of them can say:
# "scrape": counted when the page is asked for, every request in a slot (prompt included);
# "step": set at every engine step, requests being prefilled among the running;
# "decode_log": set at each prefill batch (leaving out the requests that batch admits) and once
# every `decode_log_interval` decode batches (SGLang's scheduler; every 30 s when idle).
HELD_REFRESH = ("scrape", "step", "decode_log")


@dataclass(frozen=True)
class MetricNames:
    """Where the server's /metrics keeps each figure (sample names as they appear)."""

    prefix: str  # every metric of this server starts with it
    # (accepted draft tokens, drafting steps): with `generated`, tokens per target forward pass
    # = generated / (generated - accepted); the server's own per-drafting-step figure is 1 + a/d
    accept_counters: tuple[str, str] | None = None
    accept_gauge: str | None = None  # the server's own tokens per forward, over its last logging interval
    cache_counters: tuple[tuple[str, str], ...] = ()  # (hit tokens, queried tokens), first found
    # (hit tokens, prompt tokens computed): a server that counts the two apart (llama.cpp), whose
    # queried tokens are their sum
    cache_parts: tuple[str, str] | None = None
    cache_gauge: str | None = None
    running: str | None = None
    queued: str | None = None
    # When `running` and `queued` are set (`HELD_REFRESH`): at each scrape, at each engine step, or
    # at the server's batch logs only
    held_refresh: str = "scrape"
    ttft: str | None = None  # histogram: mean = change of _sum / change of _count
    requests: str | None = None  # finished requests
    generated: str | None = None  # generated tokens
    # `generated` grows as the tokens are made, step by step (vLLM), rather than by a request's
    # whole answer when it finishes (SGLang, llama.cpp): a request that crosses a cell's edge is
    # then counted in part on each side
    generated_each_step: bool = False
    # Requests a router in front of this server sent to each worker (label `worker`), on the
    # router's own page; the first name found counts.
    router_requests: tuple[str, ...] = ()
    # Speculative decoding per verify step, to check each request's own account against and for
    # the acceptance by draft position: the verify steps (SGLang's verify calls, counted when a
    # request finishes; vLLM's and llama.cpp's drafts) and the drafts accepted at each draft
    # position (label `position`, from 0: the steps that accepted more than that many)
    verify_steps: str | None = None
    accepted_per_position: str | None = None


@dataclass(frozen=True)
class Probes:
    """Where the server says what it is: its own info endpoint, read once at the start of a run."""

    kind: str  # `server.kind` in the manifest
    info_paths: tuple[str, ...]  # the info endpoint: the first of these paths that answers
    marks: tuple[str, ...]  # a field of the info body that identifies the server; () = any object
    version_field: str  # the info body's field holding the version (or build)
    owned_by: str  # `owned_by` of its models in /v1/models, when the info endpoint is missing
    more_paths: tuple[tuple[str, ...], ...] = ()  # other endpoints kept for the manifest
    router_kind: str | None = None  # a router in front of this server, told apart by
    router_marks: tuple[str, ...] = ()  # these fields of the same info body


@dataclass(frozen=True)
class Flavour:
    """One server as the tool sees it."""

    name: str  # registry key, the simulator's `--flavor`
    title: str  # shown in reports
    delta: DeltaKeys
    errors: ErrorShape
    metrics: MetricNames
    probes: Probes
    server_header: str  # its HTTP `Server` header


SGLANG = Flavour(
    "sglang", "SGLang",
    DeltaKeys(reasoning="reasoning_content"),
    ErrorShape(("object", "message", "type", "param", "code"), nested_in_body=False,
               done_after_stream_error=True),
    MetricNames(
        "sglang:", accept_gauge="sglang:spec_accept_length",
        cache_counters=(("sglang:cached_tokens_total", "sglang:prompt_tokens_total"),),
        cache_gauge="sglang:cache_hit_rate", running="sglang:num_running_reqs",
        queued="sglang:num_queue_reqs", held_refresh="decode_log", ttft="sglang:time_to_first_token_seconds",
        requests="sglang:num_requests_total", generated="sglang:generation_tokens_total",
        # sglang-router up to 0.2, then its Model Gateway names (0.3 on), whose circuit breaker
        # counts every request's outcome per worker.
        router_requests=("sgl_router_processed_requests_total", "smg_worker_cb_outcomes_total"),
        verify_steps="sglang:spec_verify_calls_total"),  # observability/metrics_collector.py (0.5.23)
    Probes("sglang", ("/get_server_info", "/server_info"), marks=("tp_size", "internal_states"),
           version_field="version", owned_by="sglang",
           more_paths=(("/get_model_info", "/model_info"),),  # model path, architecture
           router_kind="sglang-router", router_marks=("router_manager", "workers_count")),
    server_header="uvicorn")
VLLM = Flavour(
    "vllm", "vLLM",
    DeltaKeys(reasoning="reasoning"),
    ErrorShape(("message", "type", "param", "code"), nested_in_body=True, done_after_stream_error=True),
    MetricNames(
        "vllm:",
        accept_counters=("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total"),
        cache_counters=(("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
                        ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total")),
        cache_gauge="vllm:gpu_prefix_cache_hit_rate", running="vllm:num_requests_running",
        queued="vllm:num_requests_waiting", held_refresh="step", ttft="vllm:time_to_first_token_seconds",
        requests="vllm:request_success_total", generated="vllm:generation_tokens_total",
        generated_each_step=True,
        # v1/spec_decode/metrics.py (0.34): prometheus_client adds `_total` to a counter's samples
        verify_steps="vllm:spec_decode_num_drafts_total",
        accepted_per_position="vllm:spec_decode_num_accepted_tokens_per_pos_total"),
    Probes("vllm", ("/version",), marks=(), version_field="version", owned_by="vllm"),
    server_header="uvicorn")
LLAMACPP = Flavour(
    "llamacpp", "llama.cpp",
    DeltaKeys(reasoning="reasoning_content"),
    ErrorShape(("code", "message", "type"), nested_in_body=True, done_after_stream_error=False),
    MetricNames(  # llama-server's --metrics: no TTFT histogram and no count of requests
        "llamacpp:",
        # current llama-server, counted when a request finishes (as tokens_predicted_total is);
        # older builds export neither and show no accept length or prefix hit. Its drafts are the
        # verify steps that had a draft: an n-gram drafter drafts on few of them
        accept_counters=("llamacpp:spec_decode_num_accepted_tokens_total", "llamacpp:spec_decode_num_drafts_total"),
        # its prompt_tokens_total counts the prompt tokens it computed, the cached ones apart
        cache_parts=("llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_tokens_total"),
        running="llamacpp:requests_processing", queued="llamacpp:requests_deferred",
        generated="llamacpp:tokens_predicted_total",
        # tools/server/server-task.cpp: its drafts are its verify steps (`n_draft_verif_steps`)
        verify_steps="llamacpp:spec_decode_num_drafts_total",
        accepted_per_position="llamacpp:spec_decode_num_accepted_tokens_per_pos_total"),
    Probes("llama.cpp", ("/props",), marks=("default_generation_settings", "build_info"),
           version_field="build_info", owned_by="llamacpp"),
    server_header="llama.cpp")

# SGLang's own running-request limit when --max-running-requests is not given: what its scheduler
# derived, per data-parallel rank, in the info body's `internal_states` (kept with the launch flags)
EFFECTIVE_MAX_RUNNING = "effective_max_running_requests_per_dp"

FLAVOURS: dict[str, Flavour] = {f.name: f for f in (SGLANG, VLLM, LLAMACPP)}

# What a client's stream reader needs, whatever the server: every delta key that carries text,
# reasoning keys first and the answer's key last (the order the output hash reads them in), and
# the key of an error object in an error event or a nested error body.
DELTA_TEXT_KEYS: tuple[str, ...] = (
    *dict.fromkeys(f.delta.reasoning for f in FLAVOURS.values()),
    *dict.fromkeys(f.delta.content for f in FLAVOURS.values()))
ERROR_KEY = "error"
