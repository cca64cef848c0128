"""The run's running figures second by second, from every process's `LiveCounters` snapshots.

Records exist only once a request has ended; these figures come from streams in flight: output
tokens/s (chunks as they arrive, turned into tokens by the tokens-per-chunk of the requests that
have ended so far, from their usage), streams in flight, and TTFT as each first token lands. The
coordinator keeps the last `horizon_s` seconds only, so a long run's memory stays flat.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

TTFT_POINTS = 5000  # first tokens kept for the chart


class LiveSeries:
    def __init__(self, horizon_s: int = 3600) -> None:
        self.horizon_s = horizon_s
        self._chunks: collections.OrderedDict[int, int] = collections.OrderedDict()  # second -> chunks
        self._in_flight: dict[int, dict[str, int]] = {}  # second -> source -> streams in flight
        self._latest: dict[str, int] = {}  # source -> streams in flight at its last snapshot
        self._ttfts: collections.deque[tuple[float, float]] = collections.deque(maxlen=TTFT_POINTS)
        self._usage_tokens = 0
        self._usage_chunks = 0

    def add(self, source: str, snap: dict[str, Any]) -> None:
        """One process's snapshot (`LiveCounters.snapshot_and_reset`)."""
        second = int(snap["at"])
        self._chunks[second] = self._chunks.get(second, 0) + snap["chunks"]
        self._in_flight.setdefault(second, {})[source] = snap["in_flight"]
        self._latest[source] = snap["in_flight"]
        self._ttfts.extend((snap["at"], ttft) for ttft in snap["ttfts_s"])
        self._usage_tokens += snap["completion_tokens"]
        self._usage_chunks += snap["completion_chunks"]
        while self._chunks and next(iter(self._chunks)) < second - self.horizon_s:
            self._in_flight.pop(self._chunks.popitem(last=False)[0], None)

    @property
    def tokens_per_chunk(self) -> float:
        """Usage tokens per chunk of the requests that ended (1 until one has)."""
        return self._usage_tokens / self._usage_chunks if self._usage_chunks else 1.0

    @property
    def in_flight(self) -> int:
        return sum(self._latest.values())

    def series(self) -> dict[str, list[Any]]:
        """Per second (epoch `at`): output tokens/s and streams in flight (a source that sent no
        snapshot in a second counts with its last one); TTFT points as [at, ttft]."""
        seconds = sorted(self._chunks)
        carried: dict[str, int] = {}
        in_flight = []
        for second in seconds:
            carried.update(self._in_flight.get(second, {}))
            in_flight.append(sum(carried.values()))
        ratio = self.tokens_per_chunk
        return {"at": seconds, "tokens_per_s": [round(self._chunks[s] * ratio, 1) for s in seconds],
                "in_flight": in_flight, "ttft": [[round(at, 3), round(v, 4)] for at, v in self._ttfts]}

    def recent(self, now: float, window_s: float = 10.0) -> dict[str, float]:
        """Output tokens/s and TTFT p50 over the last `window_s` seconds, streams in flight now."""
        chunks = sum(n for second, n in self._chunks.items() if second >= now - window_s)
        ttfts = [v for at, v in self._ttfts if at >= now - window_s]
        return {"in_flight": self.in_flight, "tokens_per_s": chunks * self.tokens_per_chunk / window_s,
                "ttft_p50_s": float(np.median(ttfts)) if ttfts else float("nan")}
