"""The continuous-batching engine: one scheduler loop over simulated time.

Like SGLang's scheduler, each iteration is either a prefill step (new requests' uncached prompt
tokens, in chunks of `chunked_prefill_size`, which pauses decoding) or one verify step for every
running request; at most `max_running_requests` requests hold a slot and the rest wait in FCFS
order; a submitted request joins that queue only after the front end's latency (`frontend_s`),
which never holds up the loop. Step durations come from the preset's timing model, multiplied
by `time_scale`, and the loop keeps an absolute schedule (a late wake-up is measured as
scheduling lag, not added to the next step). The engine knows nothing about HTTP: a request's
`on_step(start, end, done)` callback receives each step's new tokens.
"""

from __future__ import annotations

import bisect
import collections
import hashlib
import random
from array import array
from functools import lru_cache
from time import monotonic
from typing import Callable

import gevent
from gevent.event import Event

from loadlib.sim import content, tokenizer, toolcalls
from loadlib.sim.metrics import Histogram
from loadlib.sim.presets import SimConfig
from loadlib.sim.radix import RadixCache

StepCallback = Callable[[int, int, bool], None]
LAG_WINDOW_S = 5.0  # /metrics reports lag quantiles over this recent window


@lru_cache(maxsize=256)
def accept_cdf(mean: float, block: int) -> tuple[float, ...]:
    """Cumulative law of tokens per verify step (1..block) with the given mean.

    Each of the block - 1 draft tokens is accepted with probability p only if all earlier ones
    were (a truncated geometric law, as in chain speculative decoding); p is solved from the mean.
    """
    mean = min(max(mean, 1.0), float(block))

    def expected(p: float) -> float:
        return sum(p ** i for i in range(block))

    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected(mid) < mean else (lo, mid)
    p = (lo + hi) / 2
    cdf, total = [], 0.0
    for g in range(1, block):
        total += p ** (g - 1) * (1 - p)
        cdf.append(total)
    return tuple(cdf)


class SimRequest:
    """One generation request as the engine sees it (token counts, cache state, progress)."""

    __slots__ = ("rid", "prompt_ids", "prompt_tokens", "cached_tokens", "loaded_tokens", "prefilled", "limit",
                 "output", "generated", "streamed", "finish_reason", "aborted", "on_step",
                 "uncounted", "verify_steps", "accepted", "accept_histogram", "_cdf", "_cdf_reasoning", "_rng")

    def __init__(self, rid: str, prompt_ids: list[int], output: content.Output, limit: int,
                 finish_reason: str, cdf: tuple[float, ...], cdf_reasoning: tuple[float, ...],
                 rng: random.Random) -> None:
        self.rid = rid
        self.prompt_ids = prompt_ids
        self.prompt_tokens = len(prompt_ids)
        self.cached_tokens = 0  # from the prefix cache, the host tier's included
        self.loaded_tokens = 0  # of those, the ones loaded back from the host tier
        self.prefilled = -1  # -1: not yet matched against the radix cache
        self.limit = limit  # tokens this request will generate in total
        self.output = output
        self.generated = 0
        self.streamed = 0  # tokens already handed to `on_step`
        self.finish_reason = finish_reason  # what ends it when `generated` reaches `limit`
        self.aborted = False
        self.on_step: StepCallback = _ignore
        self.uncounted = 0  # of its tokens, those the generated-token counters leave out (a fault)
        # its speculative decoding as the server accounts it per request: verify steps, drafts
        # accepted, and how many steps accepted exactly 0, 1, ... drafts (index = drafts accepted)
        self.verify_steps = self.accepted = 0
        self.accept_histogram = [0] * (len(cdf) + 1)
        self._cdf = cdf
        self._cdf_reasoning = cdf_reasoning
        self._rng = rng

    def draw_step(self) -> int:
        """Tokens this verify step adds (1 + accepted drafts), reproducible per prompt; never more
        than the answer has left (a server drafts no further than its max_tokens), and counted in
        the request's own account."""
        cdf = self._cdf_reasoning if self.generated < self.output.reasoning_len else self._cdf
        gain = min(bisect.bisect_right(cdf, self._rng.random()) + 1, self.limit - self.generated)
        self.verify_steps += 1
        self.accepted += gain - 1
        self.accept_histogram[gain - 1] += 1
        return gain


def _ignore(start: int, end: int, done: bool) -> None:
    return None


class SpecStats:
    """Speculative-decoding figures as SGLang's scheduler keeps them.

    Each decode batch adds its tokens (1 + accepted drafts per request) and its request-steps to
    interval accumulators; every `decode_log_interval` decode batches SGLang's decode log sets
    the `spec_accept_length` / `spec_accept_rate` gauges from them, folds them into lifetime
    totals and resets them. So the gauges describe the last interval only (and stay put until
    the next one completes), while `/get_server_info`'s `avg_spec_accept_length` is the lifetime
    average over completed intervals (`spec_total_num_accepted_tokens /
    spec_total_num_forward_ct`, cumulative since the server started).
    """

    __slots__ = ("tokens", "forwards", "total_tokens", "total_forwards", "accept_length",
                 "accept_rate", "drafts_total", "draft_tokens_total", "accepted_total",
                 "accepted_per_position", "verify_calls_total")

    def __init__(self) -> None:
        self.tokens = self.forwards = 0  # since the last decode log
        self.total_tokens = self.total_forwards = 0  # over every completed interval
        self.accept_length = self.accept_rate = 0.0  # the gauges
        # vLLM's and llama.cpp's counters, at every verify step: one draft per request and step,
        # its draft tokens, the ones accepted (the step's tokens but the one it samples), and those
        # accepted at each draft position (from 0: the steps that accepted more than that many)
        self.drafts_total = self.draft_tokens_total = self.accepted_total = 0
        self.accepted_per_position: list[int] = []
        self.verify_calls_total = 0  # SGLang's: each request's verify steps, when it finishes

    def count_step(self, tokens: int, requests: int, draft_tokens: int) -> None:
        """One verify step of `requests` requests that made `tokens` tokens."""
        self.tokens += tokens
        self.forwards += requests
        self.drafts_total += requests
        self.draft_tokens_total += requests * (draft_tokens - 1)
        self.accepted_total += tokens - requests

    def count_positions(self, accepted: int, draft_tokens: int) -> None:
        """One request's verify step that accepted `accepted` drafts, by draft position."""
        if len(self.accepted_per_position) < draft_tokens - 1:
            self.accepted_per_position += [0] * (draft_tokens - 1 - len(self.accepted_per_position))
        for position in range(accepted):
            self.accepted_per_position[position] += 1

    def log_interval(self, draft_tokens: int) -> None:
        """SGLang's `log_decode_stats`: gauges from the interval, then into the totals."""
        if not self.forwards:
            return
        self.accept_length = self.tokens / self.forwards
        drafts = self.forwards * (draft_tokens - 1)
        self.accept_rate = (self.tokens - self.forwards) / drafts if drafts > 0 else 0.0
        self.total_tokens += self.tokens
        self.total_forwards += self.forwards
        self.tokens = self.forwards = 0

    @property
    def lifetime_accept_length(self) -> float | None:
        return self.total_tokens / self.total_forwards if self.total_forwards else None


class Stats:
    """Counters the /metrics and /get_server_info endpoints report."""

    def __init__(self) -> None:
        self.requests_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0  # when a request finishes (SGLang, llama.cpp)
        self.generated_tokens_made = 0  # as they are made, step by step (vLLM)
        self.cached_tokens_total = 0
        self.aborted_total = 0
        self.prefill_steps_total = 0
        self.batch_steps_total = 0
        self.cache_hit_rate = 0.0  # of the last prefill batch, as SGLang reports it
        self.steps_total = 0
        self.lag_sum = 0.0
        self.lag_s: collections.deque[tuple[float, float]] = collections.deque(maxlen=100_000)
        self.spec = SpecStats()
        self.recent_tokens: collections.deque[tuple[float, int]] = collections.deque(maxlen=256)
        self.ttft = Histogram()
        self.e2e = Histogram()


class Engine:
    """A simulated SGLang instance: queue, batch, radix cache and the step loop."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        host_tokens = round(cfg.radix_cache_tokens * cfg.hicache_ratio) if cfg.enable_hierarchical_cache else 0
        self.radix = RadixCache(cfg.radix_cache_tokens, cfg.page_size, host_tokens)
        self.waiting: collections.deque[SimRequest] = collections.deque()
        self.running: list[SimRequest] = []
        self.stats = Stats()
        self._chunked: SimRequest | None = None
        self._decode_ct = 0
        self._work = Event()
        self._loop: gevent.Greenlet | None = None

    # --- requests ------------------------------------------------------------------------------

    def make_request(self, rid: str, messages: list[dict], max_tokens: int | None,
                     temperature: float, thinking: bool, natural_tokens: int | None = None,
                     tools: object = None, tool_choice: object = "auto", ignore_eos: bool = False) -> SimRequest:
        """Tokenizes and prepares a request; output and acceptance depend only on the prompt
        (and thinking, and tools) at temperature 0. With `ignore_eos` (and `max_tokens`) an answer
        runs to exactly `max_tokens`, as SGLang's and vLLM's do. ValueError: unusable `tools`."""
        cfg = self.cfg
        texts = {role: " ".join(tokenizer.message_text(m.get("content")) for m in messages
                                if m.get("role") == role) for role in ("system", "user")}
        functions = toolcalls.functions_to_call(tools, tool_choice, " ".join(texts.values()))
        forced = ignore_eos and max_tokens is not None and not functions  # the answer runs to max_tokens
        ids = tokenizer.encode_chat(messages, thinking, tools)
        seed = int.from_bytes(hashlib.blake2b(array("q", ids).tobytes(), digest_size=8).digest(),
                              "little")
        rng_seed = seed if temperature <= 0 else random.getrandbits(64)
        domain = content.classify(texts["user"])
        reasoning = (cfg.thinking_base + (seed >> 24) % max(1, cfg.thinking_span)) if thinking else 0
        if functions:
            output = toolcalls.output_for(rng_seed, functions, texts["user"], domain, reasoning)
            answer_domain = "code"  # JSON arguments are as predictable for the draft as code
        else:
            answer = max_tokens if forced else natural_tokens if natural_tokens is not None else (
                cfg.natural_base + seed % max(1, cfg.natural_span))
            output = content.output_for(rng_seed, domain, max(1, answer), reasoning)
            answer_domain = domain
        natural = len(output.texts)
        room = max(1, cfg.context_length - len(ids))
        cap = min(max_tokens if max_tokens is not None else natural, room)
        limit, finish = (natural, "stop") if natural <= cap and not forced else (cap, "length")
        block = cfg.speculative_num_draft_tokens
        lang = content.language(texts["user"]) if domain == "code" else None
        return SimRequest(rid, ids, output, limit, finish,
                          accept_cdf(cfg.accept.get(answer_domain, 2.0)
                                     * (1.0 if functions else cfg.accept_by_language.get(lang, 1.0)), block),
                          accept_cdf(cfg.reasoning_accept.get(domain, 2.0)
                                     * cfg.reasoning_accept_by_language.get(lang, 1.0), block),
                          random.Random(rng_seed ^ 0x5EED))

    def submit(self, req: SimRequest) -> None:
        """Queues a request once the front end (HTTP, template, tokenizer, IPC) has had it for
        `frontend_s`; that latency overlaps whatever the scheduler is doing."""
        delay = self.cfg.frontend_s * self.cfg.time_scale
        if delay > 0:
            gevent.spawn_later(delay, self._enqueue, req)
        else:
            self._enqueue(req)

    def _enqueue(self, req: SimRequest) -> None:
        self.waiting.append(req)
        self._work.set()

    def abort(self, req: SimRequest) -> None:
        """Drops a request (its client went away); it leaves the batch at the next step."""
        if not req.aborted and req.generated < req.limit:
            self.stats.aborted_total += 1
        req.aborted = True

    @property
    def chunked_pending(self) -> bool:
        return self._chunked is not None

    def recent_lag(self, window_s: float = LAG_WINDOW_S) -> list[float]:
        """Scheduling lags (s) of the steps that ended in the last `window_s` seconds."""
        since = monotonic() - window_s
        return [lag for t, lag in self.stats.lag_s if t >= since]

    def gen_throughput(self) -> float:
        """Generated tokens per (wall-clock) second over the last few hundred verify steps."""
        recent = self.stats.recent_tokens
        if len(recent) < 2 or monotonic() - recent[-1][0] > 5:
            return 0.0
        span = recent[-1][0] - recent[0][0]
        return sum(n for _, n in list(recent)[1:]) / span if span > 0 else 0.0

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running or self._chunked)

    def flush_cache(self) -> bool:
        """Empties the radix cache; refused (False) while requests are queued or running."""
        if self.busy:
            return False
        self.radix.reset()
        return True

    # --- loop ------------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.kill()

    def _run(self) -> None:
        next_t = monotonic()
        scale = self.cfg.time_scale
        while True:
            if not self.busy:
                self._work.clear()
                self._work.wait()
                next_t = monotonic() + self.cfg.admission_delay_s * scale
                self._sleep_until(next_t)
            batch = self._prefill_batch()
            if batch:
                next_t += self._prefill_duration(batch) * scale
                self._sleep_until(next_t)
                self._finish_prefill(batch)
            elif self.running:
                if any(r.aborted for r in self.running):
                    self.running = [r for r in self.running if not r.aborted]
                    continue
                next_t += self._verify_duration() * scale
                self._sleep_until(next_t)
                self._verify_step()

    def _sleep_until(self, target: float) -> None:
        while True:
            delay = target - monotonic()
            if delay <= 0:
                break
            gevent.sleep(delay)
        now = monotonic()
        lag = now - target
        stats = self.stats
        stats.lag_s.append((now, lag))
        stats.lag_sum += lag
        stats.steps_total += 1

    # --- prefill --------------------------------------------------------------------------------

    def _prefill_batch(self) -> list[tuple[SimRequest, int]]:
        """The next prefill step's (request, new tokens) pairs, FCFS within the token budget."""
        cfg = self.cfg
        budget = cfg.chunked_prefill_size if cfg.chunked_prefill_size > 0 else cfg.max_prefill_tokens
        budget = min(budget, cfg.max_prefill_tokens)
        batch: list[tuple[SimRequest, int]] = []
        slots = cfg.max_running_requests - len(self.running)
        if self._chunked is not None:
            req, self._chunked = self._chunked, None
            slots -= 1
            if not req.aborted:
                n = min(req.prompt_tokens - req.prefilled, budget)
                batch.append((req, n))
                budget -= n
                if req.prefilled + n < req.prompt_tokens:
                    self._chunked = req
                    return batch
        while self.waiting and slots > 0 and budget > 0:
            req = self.waiting.popleft()
            if req.aborted:
                continue
            if req.prefilled < 0:
                if not cfg.disable_radix_cache:
                    hit = self.radix.match(req.prompt_ids[:-1])
                    req.cached_tokens, req.loaded_tokens = hit.tokens, hit.host
                req.prefilled = req.cached_tokens
            n = min(req.prompt_tokens - req.prefilled, budget)
            batch.append((req, n))
            budget -= n
            slots -= 1
            if req.prefilled + n < req.prompt_tokens:
                self._chunked = req
                break
        return batch

    def _prefill_duration(self, batch: list[tuple[SimRequest, int]]) -> float:
        """Linear and attention terms over the batch's new tokens, but at least one forward; then
        loading back what a request's first chunk found on the host tier (not overlapped)."""
        cfg = self.cfg
        total = load = 0.0
        for req, n in batch:
            c = req.prefilled
            total += n * cfg.prefill_token_s + ((c + n) ** 2 - c ** 2) * cfg.prefill_quad_s
            if c == req.cached_tokens:
                load += req.loaded_tokens / cfg.hicache_load_tokens_per_s
        return max(cfg.prefill_step_s, total) + load

    def _finish_prefill(self, batch: list[tuple[SimRequest, int]]) -> None:
        stats = self.stats
        stats.prefill_steps_total += 1
        new = sum(n for _, n in batch)
        cached = sum(r.cached_tokens for r, _ in batch if r.prefilled == r.cached_tokens)
        stats.cache_hit_rate = cached / (cached + new) if cached + new else 0.0
        for req, n in batch:
            req.prefilled += n
            if req.aborted or req.prefilled < req.prompt_tokens:
                continue
            if not self.cfg.disable_radix_cache:
                self.radix.insert(req.prompt_ids)
            stats.prompt_tokens_total += req.prompt_tokens
            stats.cached_tokens_total += req.cached_tokens
            req.generated = req.streamed = 1  # prefill samples the first token
            stats.generated_tokens_made += 1
            if req.limit <= 1:
                self._finish(req)
                req.on_step(0, 1, True)
            else:
                self.running.append(req)
                req.on_step(0, 1, False)

    # --- decode ---------------------------------------------------------------------------------

    def _verify_duration(self) -> float:
        cfg = self.cfg
        ctx = 0
        for r in self.running:
            ctx += r.prompt_tokens + r.generated
        return (cfg.verify_step_s + (len(self.running) - 1) * cfg.verify_extra_req_s
                + ctx * cfg.verify_ctx_token_s)

    def _verify_step(self) -> None:
        """One verify step for the batch; like SGLang, output streams every `stream_interval`
        decode steps (and always at the end), so a larger interval merges steps into a chunk."""
        stats = self.stats
        still: list[SimRequest] = []
        step_tokens = batch = 0
        self._decode_ct += 1
        stream_now = self._decode_ct % self.cfg.stream_interval == 0
        spec, draft_tokens = stats.spec, self.cfg.speculative_num_draft_tokens
        for req in self.running:
            if req.aborted:
                continue
            batch += 1
            gain = req.draw_step()
            step_tokens += gain
            spec.count_positions(gain - 1, draft_tokens)
            end = req.generated + gain
            stats.generated_tokens_made += min(end, req.limit) - req.generated
            if end >= req.limit:
                req.generated = req.limit
                self._finish(req)
                req.on_step(req.streamed, req.limit, True)
            else:
                req.generated = end
                still.append(req)
                if stream_now:
                    req.on_step(req.streamed, end, False)
                    req.streamed = end
        stats.batch_steps_total += 1
        if batch:
            stats.recent_tokens.append((monotonic(), step_tokens))
        spec.count_step(step_tokens, batch, draft_tokens)
        if self._decode_ct % self.cfg.decode_log_interval == 0:
            spec.log_interval(draft_tokens)
        self.running = still

    def _finish(self, req: SimRequest) -> None:
        stats = self.stats
        stats.requests_total += 1
        stats.generation_tokens_total += req.limit - req.uncounted
        stats.spec.verify_calls_total += req.verify_steps
        stats.generated_tokens_made -= req.uncounted
        if not self.cfg.disable_radix_cache:
            out_ids = [tokenizer.piece_id(t) for t in req.output.texts[:req.limit - 1]]
            self.radix.insert(req.prompt_ids + out_ids)
