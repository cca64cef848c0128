"""Per-request formulas of the protocol's figures, defined once (see PROTOCOL.md, "uni-bench").

Plain arithmetic, so the same function serves a float (the live path, one request at a time) and
a pandas Series (the post-processor, a whole run at once).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

if TYPE_CHECKING:  # a Locust worker uses these formulas on floats and never loads pandas
    import pandas as pd

Num = TypeVar("Num", float, np.ndarray, "pd.Series")


def decode_tps(completion_tokens: Num, ttft_s: Num, total_s: Num) -> Num:
    """Decode rate in tokens/s: `(comp - 1) / (total - ttft)`.

    The first token is excluded because it arrives at `ttft`; the rest arrive between `ttft`
    and the end of the stream (infinite when they all came with the first: see `records_frame`).
    """
    return (completion_tokens - 1) / (total_s - ttft_s)


def tok_per_chunk(completion_tokens: Num, chunks: Num) -> Num:
    """`comp / non-empty chunks`: the client-side ("stream-chunk") accept length estimate.

    Not the server's verify-step accept length; never report the two as one figure.
    """
    return completion_tokens / chunks


def accept_length(verify_steps: Any, accepted_tokens: Any) -> Any:
    """Tokens per verify step of the server's account of speculative decoding: (accepted drafts +
    verify steps) / verify steps (NaN without steps): each step keeps its accepted drafts and adds
    one token of its own. Not the client's tok/chunk."""
    steps = np.asarray(verify_steps, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        length = (np.asarray(accepted_tokens, dtype=float) + steps) / steps
    return np.where(steps > 0, length, np.nan)[()]


def end_to_end_tps(completion_tokens: Num, total_s: Num) -> Num:
    """`comp / total`: output rate with prefill and queueing included."""
    return completion_tokens / total_s


def prefill_tps(prompt_tokens: Num, ttft_s: Num) -> Num:
    """Cold prefill rate `prompt_tokens / ttft` (meaningful only without a prefix-cache hit)."""
    return prompt_tokens / ttft_s


def uncached_prefill_tps(prompt_tokens: Num, cached_tokens: Num, ttft_s: Num) -> Num:
    """`(prompt_tokens - cached_tokens) / ttft`: prefill rate over the tokens actually computed.

    With a prefix (radix) cache hit only the uncached tail is prefilled, so this stays
    comparable with the cold figure where `prefill_tps` would be inflated by the hit.
    """
    return (prompt_tokens - cached_tokens) / ttft_s


def chunk_gap_s(ttft_s: float, last_chunk_s: float | None, chunks: int) -> float | None:
    """Mean time between the stream's chunks after the first: `(last_chunk - ttft) / (chunks - 1)`;
    None with fewer than two chunks. With speculative decoding a chunk carries several tokens, so
    this is the step the user sees, not the time per token (that is 1 / decode)."""
    if last_chunk_s is None or chunks < 2:
        return None
    return (last_chunk_s - ttft_s) / (chunks - 1)


def longest_chunk_gap_s(gaps_s: list[float]) -> float:
    """The longest wait between two successive chunks of a stream (its measured gaps,
    `--chunk-times`): the stall that `chunk_gap_s`, a mean, spreads over all its gaps; NaN with
    fewer than two chunks."""
    return max(gaps_s) if gaps_s else math.nan


def forward_rate(decode: Num, tokens_per_chunk: Num) -> Num:
    """Estimated verify steps per second: decode / tok-per-chunk (roughly constant per setup)."""
    return decode / tokens_per_chunk


def from_intended_send(latency_s: Num, queue_s: Num) -> Num:
    """A latency (TTFT, total) counted from when the request was meant to be sent, not from when it
    was: `latency_s + queue_s`, the client-side wait of a request sent on a schedule (open, trace)
    that found no free user. Counting from the actual send leaves that wait out, so an overloaded
    client or server hides its worst latencies (coordinated omission); this counts them. A missing
    `queue_s` (a request not sent on a schedule) counts as no wait."""
    return latency_s + np.fmax(queue_s, 0.0)


def meets_slo(ok: np.ndarray, ttft_s: np.ndarray, decode_tps: np.ndarray, slo_ttft_s: float | None,
              slo_decode_tps: float | None) -> np.ndarray:
    """Per request, whether it meets the SLO: it succeeded, its TTFT is at most `slo_ttft_s` and
    its decode at least `slo_decode_tps` (an answer in one read has no decode rate, NaN, and is
    judged on its TTFT); a target of None is not checked. Goodput counts these requests."""
    meets = np.asarray(ok, dtype=bool).copy()
    if slo_ttft_s is not None:
        meets &= np.asarray(ttft_s) <= slo_ttft_s
    if slo_decode_tps is not None:
        meets &= ~(np.asarray(decode_tps) < slo_decode_tps)
    return meets

