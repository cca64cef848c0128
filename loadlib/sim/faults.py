"""Injected faults, so that the tool's robustness can be tested against a known misbehaviour.

A fault spec is `KIND[=VALUE][@SHARE]`: with `--fault` it applies to SHARE of the requests
(default all; chosen by a seeded generator, so a run is reproducible), and a request can ask for
faults itself with the header `X-Sim-Fault: KIND[=VALUE][, KIND[=VALUE]...]`.

| kind          | effect                                                        | VALUE            |
|---------------|---------------------------------------------------------------|------------------|
| `http500`     | HTTP 500 with an error body, no stream                         | -                |
| `http503`     | HTTP 503 with an error body and `Retry-After`                  | Retry-After (s, default 1) |
| `http429`     | HTTP 429 with an error body and `Retry-After`                  | Retry-After (s, default 1) |
| `too_long`    | the server's 400 for a prompt longer than the context          | -                |
| `error_event` | `data: {"error": ...}` mid-stream, then the stream ends        | after N tokens (default half) |
| `drop`        | the connection is closed mid-stream (no terminating chunk)     | after N tokens (default half) |
| `malformed`   | one `data:` line with broken JSON mid-stream; the stream goes on | after N tokens (default half) |
| `no_usage`    | no usage chunk even when `include_usage` was asked for         | -                |
| `no_done`     | no `data: [DONE]` line (the body still ends properly)          | -                |
| `stall_first` | a pause before the first chunk (time-scaled like all durations) | seconds (default 5) |
| `stall`       | a pause before a later chunk (time-scaled)                     | seconds (default 5) |
| `count_skew`  | the stream is whole, but the server's generated-token counters leave out a share of its tokens | share (default 0.1) |
| `front_queue` | the request waits before the server, which lets K through at a time (a proxy in front), unseen by its gauges | K (default 1) |
| `cache_drop`  | the prefix cache is emptied as the request arrives (a flush or an eviction)  | -                |
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable

KINDS = ("http500", "http503", "http429", "too_long", "error_event", "drop", "malformed",
         "no_usage", "no_done", "stall_first", "stall", "count_skew", "front_queue", "cache_drop")
HEADER = "x-sim-fault"


@dataclass(frozen=True)
class FaultSpec:
    kind: str
    value: float | None = None
    share: float = 1.0


def parse_spec(text: str) -> FaultSpec:
    """`KIND[=VALUE][@SHARE]` -> FaultSpec; ValueError names the bad part."""
    body, _, share_text = text.strip().partition("@")
    kind, _, value_text = body.partition("=")
    kind = kind.strip()
    if kind not in KINDS:
        raise ValueError(f"unknown fault {kind!r} (known: {', '.join(KINDS)})")
    try:
        value = float(value_text) if value_text else None
        share = float(share_text) if share_text else 1.0
    except ValueError:
        raise ValueError(f"bad fault spec {text!r}: VALUE and SHARE must be numbers") from None
    if not 0.0 <= share <= 1.0 or (value is not None and value < 0):
        raise ValueError(f"bad fault spec {text!r}: SHARE must be in [0, 1] and VALUE >= 0")
    if kind == "count_skew" and value is not None and value > 1:
        raise ValueError(f"bad fault spec {text!r}: count_skew's VALUE is a share, in [0, 1]")
    if kind == "front_queue" and value is not None and (value < 1 or value != int(value)):
        raise ValueError(f"bad fault spec {text!r}: front_queue's VALUE is a whole number of requests, 1 or more")
    return FaultSpec(kind, value, share)


@dataclass
class Faults:
    """What to do to one request (None fields: that fault is off)."""

    http_status: int | None = None
    retry_after: float | None = None
    too_long: bool = False
    error_at: int | None = None
    drop_at: int | None = None
    malformed_at: int | None = None
    no_usage: bool = False
    no_done: bool = False
    stall_first_s: float | None = None
    stall_at: int | None = None
    stall_s: float | None = None
    count_skew: float | None = None  # share of the tokens the counters leave out
    front_queue: int | None = None  # requests the queue in front lets through at once
    cache_drop: bool = False

    def place(self, limit: int) -> None:
        """Resolves mid-stream positions left at their default (half the output, at least 2)."""
        half = max(2, limit // 2)
        for name in ("error_at", "drop_at", "malformed_at", "stall_at"):
            if getattr(self, name) == -1:
                setattr(self, name, half)


def _apply(faults: Faults, spec: FaultSpec) -> None:
    kind, value = spec.kind, spec.value
    if kind in ("http500", "http503", "http429"):
        faults.http_status = int(kind[4:])
        faults.retry_after = value if value is not None else (1.0 if kind != "http500" else None)
    elif kind == "too_long":
        faults.too_long = True
    elif kind in ("error_event", "drop", "malformed"):
        setattr(faults, f"{kind.split('_')[0]}_at", int(value) if value is not None else -1)
    elif kind == "no_usage":
        faults.no_usage = True
    elif kind == "no_done":
        faults.no_done = True
    elif kind == "stall_first":
        faults.stall_first_s = value if value is not None else 5.0
    elif kind == "stall":
        faults.stall_s = value if value is not None else 5.0
        faults.stall_at = -1
    elif kind == "count_skew":
        faults.count_skew = value if value is not None else 0.1
    elif kind == "front_queue":
        faults.front_queue = int(value) if value is not None else 1
    elif kind == "cache_drop":
        faults.cache_drop = True


class FaultPicker:
    """Decides each request's faults from the configured shares and its own header."""

    def __init__(self, specs: Iterable[FaultSpec], seed: int = 0) -> None:
        self.specs = tuple(specs)
        self._rng = random.Random(seed)

    def pick(self, header: str | None) -> Faults | None:
        chosen = [s for s in self.specs if self._rng.random() < s.share]
        if header:
            chosen += [parse_spec(part) for part in header.split(",") if part.strip()]
        if not chosen:
            return None
        faults = Faults()
        for spec in chosen:
            _apply(faults, spec)
        return faults
