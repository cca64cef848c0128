"""The server's own timeline for report.html: requests running and queued, KV-cache use and accept
length at each `/metrics` scrape, per source, on the records' clock (seconds since the first send).

These are the scraped values as the server gave them, one point a scrape (a counter-based accept
length is the change between two scrapes); the per-cell figures stay `server_figures`'."""

from __future__ import annotations

from typing import Any

from loadlib.truth.server_figures import flavour_of
from loadlib.wire.flavours import FLAVOURS

# KV-cache use as each flavour's /metrics names it (a share, 0-1); not a per-cell figure, so not in
# the flavours' `MetricNames`
KV_USE = {"sglang": "sglang:token_usage", "vllm": "vllm:kv_cache_usage_perc",
          "llamacpp": "llamacpp:kv_cache_usage_ratio"}
SERIES = ("running", "queued", "kv_use", "accept_length")
NAMES = frozenset(name for f in FLAVOURS.values() for name in (
    f.metrics.running, f.metrics.queued, f.metrics.accept_gauge, *(f.metrics.accept_counters or ()),
    KV_USE.get(f.name)) if name)  # the only samples parsed


def server_series(scrapes: list[dict[str, Any]], origin: float) -> list[dict[str, Any]]:
    """Per source with a known flavour in the run's parsed scrapes (`NAMES` among the names parsed):
    `t_s` and the `SERIES` (None where a scrape lacks one)."""
    by_source: dict[str, list[dict[str, Any]]] = {}
    for entry in scrapes:
        if not entry.get("error") and any(sample[0] in NAMES for sample in entry.get("samples") or ()):
            by_source.setdefault(str(entry.get("source")), []).append(entry)
    found = []
    for source, entries in by_source.items():
        flavour = flavour_of(entries)
        if flavour is not None:
            found.append({"source": source, **_series(entries, flavour.metrics, KV_USE.get(flavour.name), origin)})
    return found


def _series(entries: list[dict[str, Any]], names: Any, kv_name: str | None, origin: float) -> dict[str, list]:
    series: dict[str, list] = {"t_s": [], **{name: [] for name in SERIES}}
    previous: tuple[float | None, float | None] = (None, None)
    for entry in sorted(entries, key=lambda e: e["t"]):
        series["t_s"].append(round(entry["t"] - origin, 3))
        series["running"].append(_sum(entry, names.running))
        series["queued"].append(_sum(entry, names.queued))
        series["kv_use"].append(_sum(entry, kv_name))
        if names.accept_counters:
            now = tuple(_sum(entry, name) for name in names.accept_counters)
            series["accept_length"].append(_counter_rate(previous, now))
            previous = now
        else:
            gauge = _sum(entry, names.accept_gauge)  # below 1: no speculative step yet, no figure
            series["accept_length"].append(gauge if gauge is not None and gauge >= 1 else None)
    return series


def _sum(entry: dict[str, Any], name: str | None) -> float | None:
    """A sample summed over its series (engines, ranks), None where the page lacks it."""
    values = [s[2] for s in entry.get("samples") or () if name is not None and s[0] == name]
    return float(sum(values)) if values else None


def _counter_rate(before: tuple, now: tuple) -> float | None:
    """1 + accepted/drafts between two scrapes; None without drafts between them."""
    if None in before or None in now or now[1] - before[1] <= 0:
        return None
    return 1 + (now[0] - before[0]) / (now[1] - before[1])
