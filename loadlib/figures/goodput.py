"""Goodput's targets, defined once: a request counts towards goodput when it succeeded, its TTFT
is at most `ttft_s` and its decode at least `decode_tps` (`formulas.meets_slo`). Goodput and
SLO attainment judge the same requests, a free-running cell's steady-window requests
(`free_running.steady_requests`): goodput is how many met the targets per second of the window,
attainment what share of them did.

Where requests were sent on a schedule (their records carry the wait for a free user, `queue_s`:
the arrival modes and a search over a rate), TTFT is judged from the intended send time
(`free_running.slo_ttft`, `formulas.from_intended_send`: TTFT plus that wait), so a client that
fell behind its schedule cannot hide the latency its requests met (coordinated omission); requests
with no schedule (closed loops) count TTFT from the send. The record says which, not the mode's name.

The summary, the report, compare and the web UI all take their defaults from `DEFAULT_SLO`; every
judgement against an SLO (goodput, a capacity search's level) takes the one `Slo`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping


@dataclass(frozen=True)
class Slo:
    """The service-level objectives of a run, the one type of them: goodput's targets (a request
    counts when it meets both `ttft_s` and `decode_tps`) and the criteria a capacity search judges a
    level by (`loadlib.figures.capacity`): TTFT's `ttft_p`th percentile at most `ttft_s`;
    `decode_p` % of requests decoding at least `decode_tps` (the slow tail); `goodput`: that share
    of requests meeting both. A criterion of None is not judged. A profile's `[slo]` table reads
    into it (`loadlib.profiles`), the manifest keeps it as a dict (`of`)."""

    ttft_s: float | None = None
    decode_tps: float | None = None
    ttft_p: float | None = None
    decode_p: float | None = None
    goodput: float | None = None

    @classmethod
    def of(cls, found: Mapping[str, Any] | None) -> Slo:
        """The SLO a manifest keeps (a profile's `[slo]`, a search's `slo`) as a dict."""
        return cls(**{field.name: (found or {}).get(field.name) for field in fields(cls)})

    @property
    def judges(self) -> bool:
        """Whether it sets a criterion a level can be judged by (the search mode needs one)."""
        return self.ttft_p is not None or self.decode_p is not None or self.goodput is not None

    def targets(self, ttft_s: float | None = None, decode_tps: float | None = None) -> Slo:
        """This SLO with goodput's two targets set: those given, else its own, else the defaults."""
        return replace(self, ttft_s=ttft_s or self.ttft_s or DEFAULT_TTFT_S,
                       decode_tps=decode_tps or self.decode_tps or DEFAULT_DECODE_TPS)


DEFAULT_TTFT_S, DEFAULT_DECODE_TPS = 2.0, 20.0
DEFAULT_SLO = Slo(DEFAULT_TTFT_S, DEFAULT_DECODE_TPS)


def goodput_slo(manifest: Mapping[str, Any], ttft_s: float | None = None, decode_tps: float | None = None) -> Slo:
    """The run's SLO with goodput's targets: those given, else the profile's `[slo]` as the manifest
    recorded it, else the defaults."""
    return Slo.of((manifest.get("profile") or {}).get("slo")).targets(ttft_s, decode_tps)
