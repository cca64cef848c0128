"""Running figures of the streams this process has in flight, for live charts.

Records exist only once a request has ended, so figures drawn from them lag a long answer by its
whole length. The client updates one `LiveCounters` per process (`COUNTERS`) as bytes arrive:
a stream starts and ends, a content chunk lands, a first token lands. Each update is one
attribute increment or one bounded append, cheap enough for the read path. A reader (the
worker's once-a-second report to the master) takes `snapshot_and_reset()`: a plain dict of what
happened since the previous snapshot.

Output tokens are counted as chunks while streams run (one chunk may carry several tokens with
speculative decoding); `completion_tokens` and `completion_chunks` of the requests that ended in
the same interval give the tokens-per-chunk ratio that turns the chunk count into a token rate.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from loadlib import clock

TTFT_BUFFER = 4096  # first tokens kept between two snapshots; older ones are dropped (counted)


class LiveCounters:
    """What this process's streams did since the last snapshot (and how many are in flight)."""

    __slots__ = ("in_flight", "chunks", "ttfts", "first_tokens", "finished", "failed",
                 "completion_tokens", "completion_chunks", "_since")

    def __init__(self) -> None:
        self.in_flight = 0  # streams sent and not yet ended (not reset by a snapshot)
        self._since = clock.now()
        self._clear()
        self.ttfts: deque[float] = deque(maxlen=TTFT_BUFFER)

    def _clear(self) -> None:
        self.chunks = 0  # content/reasoning/tool-call chunks received
        self.first_tokens = 0  # first tokens landed (also those the TTFT buffer dropped)
        self.finished = 0  # requests ended, failed or not
        self.failed = 0
        self.completion_tokens = 0  # usage.completion_tokens of the requests that ended
        self.completion_chunks = 0  # chunks of those same requests (only where usage came)

    def stream_started(self) -> None:
        self.in_flight += 1

    def first_token(self, ttft_s: float) -> None:
        """A stream's first token landed `ttft_s` after its request was sent."""
        self.first_tokens += 1
        self.ttfts.append(ttft_s)

    def stream_ended(self, failed: bool, completion_tokens: int | None, chunks: int) -> None:
        """A stream ended; its usage (if any) calibrates the chunk count into tokens."""
        self.in_flight -= 1
        self.finished += 1
        self.failed += failed
        if completion_tokens is not None:
            self.completion_tokens += completion_tokens
            self.completion_chunks += chunks

    def snapshot_and_reset(self) -> dict[str, Any]:
        """The interval's figures as a plain dict (picklable, JSON-able), then a new interval.

        `at`: epoch seconds of this snapshot; `interval_s`: seconds since the previous one;
        `in_flight`: streams in flight now; `chunks`: content chunks received in the interval;
        `ttfts_s`: TTFTs (seconds) of the first tokens that landed, oldest first, at most
        `TTFT_BUFFER`; `first_tokens`: how many landed (more than `len(ttfts_s)` if some were
        dropped); `finished`, `failed`: requests that ended; `completion_tokens`,
        `completion_chunks`: usage tokens and chunks of the ended requests that reported usage.
        """
        now = clock.now()
        snapshot = {
            "at": now, "interval_s": now - self._since, "in_flight": self.in_flight,
            "chunks": self.chunks, "ttfts_s": list(self.ttfts), "first_tokens": self.first_tokens,
            "finished": self.finished, "failed": self.failed,
            "completion_tokens": self.completion_tokens, "completion_chunks": self.completion_chunks,
        }
        self.ttfts.clear()
        self._clear()
        self._since = now
        return snapshot


COUNTERS = LiveCounters()  # this process's counters, updated by every ChatClient
