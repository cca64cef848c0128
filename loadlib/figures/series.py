"""What the charts draw that no table gives: a run's requests as points on its clock, its cells'
spans, a figure's distribution as a percentile curve, the prefill rate per request, the server's
scraped gauges over time. Pure functions over the records frame (and the scrapes); each returns
a frame of points (`x`, `y`, and `name` where it splits into several lines), and the charts
(`loadlib.report.charts`) name them. The clock is seconds since the run's first send (`origin`).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from loadlib.figures.protocol_tables import CONCURRENT_CASES, HIT, cache_states, cell_order
from loadlib.scenarios.base import SINGLE
from loadlib.truth.server_figures import flavour_of
from loadlib.wire.flavours import FLAVOURS

SHARES = np.linspace(0, 100, 101)  # the percentiles a distribution is drawn at
POINT_COLUMNS = ["x", "y", "name"]
# KV-cache use as each flavour's /metrics names it (a share, 0-1); not a per-cell figure, so not in
# the flavours' `MetricNames`
KV_USE = {"sglang": "sglang:token_usage", "vllm": "vllm:kv_cache_usage_perc",
          "llamacpp": "llamacpp:kv_cache_usage_ratio"}
SERVER_SERIES = ("running", "queued", "kv_use", "accept_length")
SERVER_NAMES = frozenset(name for f in FLAVOURS.values() for name in (
    f.metrics.running, f.metrics.queued, f.metrics.accept_gauge, *(f.metrics.accept_counters or ()),
    KV_USE.get(f.name)) if name)  # the only samples a server timeline parses


def origin(df: pd.DataFrame) -> float:
    """The run's clock's zero: its first send (NaN for no records)."""
    return float(df["sent_at"].min()) if len(df) else float("nan")


def cell_labels(df: pd.DataFrame) -> pd.Series:
    """Each record's cell as the charts name it: the single-stream cell by its scenario
    ("single: code"), every other by its cell."""
    single = "single: " + df["scenario"].astype(str)
    return df["cell"].astype(str).where(df["case"] != SINGLE, single)


def cell_spans(df: pd.DataFrame, zero: float) -> pd.DataFrame:
    """Each cell's (`cell_labels`) first send and last end (or send, for a request that never
    ended), seconds since `zero`, in the order they started: which part of the plan ran when."""
    if df.empty:
        return pd.DataFrame(columns=["label", "start", "end"])
    spans = pd.DataFrame({"label": cell_labels(df), "start": df["sent_at"] - zero,
                          "end": df["end_at"].fillna(df["sent_at"]) - zero})
    spans = spans.groupby("label", sort=False).agg(start=("start", "min"), end=("end", "max")).reset_index()
    return spans.sort_values("start", kind="stable").reset_index(drop=True)


def request_points(df: pd.DataFrame, figure: str, zero: float) -> pd.DataFrame:
    """One point per successful request that has `figure`: at its send (seconds since `zero`),
    named by its cell (`cell_labels`); the frame's index is kept, so a point names its record."""
    ok = df[df["ok"] & df[figure].notna()]
    return pd.DataFrame({"x": ok["sent_at"] - zero, "y": ok[figure], "name": cell_labels(ok)}, index=ok.index)


def percentile_curves(df: pd.DataFrame, figure: str) -> pd.DataFrame:
    """Per cell (in `cell_order`), `figure` at each percentile of `SHARES` over every successful
    request (linear interpolation), named "cell (n N)": exact, from all the records."""
    ok = df[df["ok"]]
    parts = []
    for cell in cell_order(df):
        values = ok.loc[ok["cell"] == cell, figure].dropna().to_numpy()
        if len(values):
            n = int((ok["cell"] == cell).sum())
            parts.append(pd.DataFrame({"x": SHARES, "y": np.round(np.percentile(values, SHARES), 5),
                                       "name": f"{cell} (n {n})"}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=POINT_COLUMNS)


def prefill_points(df: pd.DataFrame, hit: bool) -> pd.DataFrame:
    """Prefill t/s against the prompt tokens prefilled, one point per successful request outside
    the protocol's concurrency cells: cold requests at their whole prompt and `prefill_tps`, or
    (`hit`) prefix-cache hits at their uncached part and `uncached_prefill_tps`."""
    ok = df[df["ok"] & df["prompt_tokens"].notna() & ~df["case"].isin(CONCURRENT_CASES)]
    warm = cache_states(ok) == HIT
    if hit:
        rows = ok[warm]
        return pd.DataFrame({"x": rows["prompt_tokens"] - rows["cached_tokens"], "y": rows["uncached_prefill_tps"]},
                            index=rows.index)
    rows = ok[~warm]
    return pd.DataFrame({"x": rows["prompt_tokens"], "y": rows["prefill_tps"]}, index=rows.index)


def server_timeline(scrapes: Iterable[Mapping[str, Any]], zero: float) -> pd.DataFrame:
    """The server's own gauges at each `/metrics` scrape (the run's parsed scrapes, `SERVER_NAMES`
    among the names parsed), per source with a known flavour: `t_s` (seconds since `zero`),
    `source` and the `SERVER_SERIES`: requests running and queued, KV-cache use (0-1), accept
    length (between two scrapes for a counter-based one, the gauge where at least 1). The values
    as the server gave them, one point a scrape; the per-cell figures stay `server_figures`'."""
    by_source: dict[str, list[Mapping[str, Any]]] = {}
    for entry in scrapes:
        if not entry.get("error") and any(sample[0] in SERVER_NAMES for sample in entry.get("samples") or ()):
            by_source.setdefault(str(entry.get("source")), []).append(entry)
    parts = []
    for source, entries in by_source.items():
        flavour = flavour_of(entries)
        if flavour is not None:
            series = _server_series(entries, flavour.metrics, KV_USE.get(flavour.name), zero)
            parts.append(pd.DataFrame({"source": source, **series}))
    columns = ["t_s", "source", *SERVER_SERIES]
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)


def _server_series(entries: list[Mapping[str, Any]], names: Any, kv_name: str | None, zero: float
                   ) -> dict[str, list[float | None]]:
    series: dict[str, list[float | None]] = {"t_s": [], **{name: [] for name in SERVER_SERIES}}
    previous: tuple[float | None, ...] = (None, None)
    for entry in sorted(entries, key=lambda e: e["t"]):
        series["t_s"].append(round(entry["t"] - zero, 3))
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


def _sum(entry: Mapping[str, Any], name: str | None) -> float | None:
    """A sample summed over its series (engines, ranks), None where the page lacks it."""
    values = [s[2] for s in entry.get("samples") or () if name is not None and s[0] == name]
    return float(sum(values)) if values else None


def _counter_rate(before: tuple, now: tuple) -> float | None:
    """1 + accepted/drafts between two scrapes; None without drafts between them."""
    if None in before or None in now or now[1] - before[1] <= 0:
        return None
    return 1 + (now[0] - before[0]) / (now[1] - before[1])
