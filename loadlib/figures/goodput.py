"""Goodput's targets, defined once: a request counts towards goodput when it succeeded, its TTFT
is at most `ttft_s` and its decode at least `decode_tps` (`formulas.meets_slo`). Goodput and
SLO attainment judge the same requests, a free-running cell's steady-window requests
(`free_running.steady_requests`): goodput is how many met the targets per second of the window,
attainment what share of them did.

In the cells sent on a schedule (`SCHEDULED_CASES`: the open and trace modes), TTFT is judged from
the intended send time (`formulas.from_intended_send`: TTFT plus the wait for a free user), so a
client that fell behind its schedule cannot hide the latency its requests met (coordinated
omission); the closed and ladder modes have no schedule, and their TTFT counts from the send.

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


SCHEDULED_CASES = ("open", "trace")  # cells whose requests have an intended send time (`queue_s`)


def goodput_slo(manifest: Mapping[str, Any], ttft_s: float | None = None,
                decode_tps: float | None = None) -> GoodputSlo:
    """The given targets, else the profile's `[slo]` as the manifest recorded it, else the defaults."""
    profile = (manifest.get("profile") or {}).get("slo") or {}
    return GoodputSlo(ttft_s or profile.get("ttft_s") or DEFAULT_SLO.ttft_s,
                      decode_tps or profile.get("decode_tps") or DEFAULT_SLO.decode_tps)
