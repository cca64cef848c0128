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

The summary, the report, compare and the web UI all take their defaults from `DEFAULT_SLO`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class GoodputSlo:
    """Goodput targets: a request counts when it meets both."""

    ttft_s: float = 2.0
    decode_tps: float = 20.0


DEFAULT_SLO = GoodputSlo()


def goodput_slo(manifest: Mapping[str, Any], ttft_s: float | None = None,
                decode_tps: float | None = None) -> GoodputSlo:
    """The given targets, else the profile's `[slo]` as the manifest recorded it, else the defaults."""
    profile = (manifest.get("profile") or {}).get("slo") or {}
    return GoodputSlo(ttft_s or profile.get("ttft_s") or DEFAULT_SLO.ttft_s,
                      decode_tps or profile.get("decode_tps") or DEFAULT_SLO.decode_tps)
