"""PNG charts of one or several runs, readable without explanation (`python -m analysis plot`).

Uses matplotlib's object API (no pyplot, no global backend state), so it runs headless.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from loadlib.figures import free_running, protocol_tables
from loadlib.figures.protocol_tables import ProtocolTables, cell_order
from loadlib.modes import search as search_module
from loadlib.report.protocol import CASE_LABELS, PROTOCOL_CASES, scenario_label
from loadlib.report.sweep import sweep_plot

if TYPE_CHECKING:
    from loadlib.outputs import Reading
    from loadlib.run_view import RunView

SAMPLE = 20_000  # points drawn per run in distributions and scatters; more adds ink, not information
CASE_STYLE = {"same": "-", "different": "--"}


def render(reading: Reading) -> str:
    """Writes the charts of the reading's views into the folder `reading.out`; their paths, one a line."""
    return "\n".join(str(path) for path in plot(reading.views, reading.out))


def plot(runs: list[RunView], out_dir: str | Path) -> list[Path]:
    """Writes every chart that the runs have data for; returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tables = {run.label: run.tables for run in runs}
    charts = {
        "decode_per_scenario.png": decode_per_scenario(tables),
        "aggregate_vs_concurrency.png": aggregate_vs_concurrency(tables),
        "ttft_distribution.png": ttft_distribution(runs),
        "prefill_vs_prompt_size.png": prefill_vs_prompt_size(runs),
        **{f"timeline_{_safe(run.label)}.png": timeline(run) for run in runs},
        **{f"search_{_safe(run.label)}.png": search(run) for run in runs},
        **{f"by_length_{_safe(run.label)}.png": by_length(run) for run in runs},
        **{("sweep.png" if len(runs) == 1 else f"sweep_{_safe(run.label)}.png"): sweep(run) for run in runs},
    }
    written = []
    for name, figure in charts.items():
        if figure is not None:
            figure.savefig(out / name, dpi=110)
            written.append(out / name)
    return written


def decode_per_scenario(tables: dict[str, ProtocolTables]) -> Figure | None:
    """Single-stream decode per scenario: one bar per run, whiskers from min to max over rounds."""
    singles = {label: t.single for label, t in tables.items() if not t.single.empty}
    if not singles:
        return None
    scenarios = list(dict.fromkeys(s for single in singles.values() for s in single.index))
    fig, ax = _figure()
    width = 0.8 / len(singles)
    x = np.arange(len(scenarios))
    for i, (label, single) in enumerate(singles.items()):
        single = single.reindex(scenarios)
        mean = single["decode_tps"].to_numpy()
        whiskers = np.vstack([mean - single["decode_min"].to_numpy(), single["decode_max"].to_numpy() - mean])
        bars = ax.bar(x + (i - (len(singles) - 1) / 2) * width, mean, width, yerr=whiskers, capsize=4,
                      label=label)
        ax.bar_label(bars, labels=[f"{v:.1f}" if np.isfinite(v) else "" for v in mean], padding=2, fontsize=8)
    ax.set_xticks(x, [scenario_label(s) for s in scenarios])
    ax.set_ylabel("decode tokens/s (per stream)")
    ax.set_title("Single-stream decode per scenario\nbar = mean over rounds, whisker = min–max; "
                 "decode = (comp-1)/(total-ttft)")
    ax.margins(y=0.12)
    ax.legend(fontsize=8, ncols=min(len(singles), 3))
    return fig


def aggregate_vs_concurrency(tables: dict[str, ProtocolTables]) -> Figure | None:
    """Aggregate t/s against N, same prompt (solid) and different prompts (dashed), per run; the
    protocol's definition on the left, the wall-clock window on the right."""
    if all(t.concurrent["aggregate_tps"].isna().all() for t in tables.values()):
        return None
    fig = Figure(figsize=(13, 5.5), layout="constrained")
    protocol_ax, window_ax = fig.subplots(1, 2, sharey=True)
    definitions = ((protocol_ax, "aggregate_tps", "min", "max", "protocol: sum(comp-1) / max(total-ttft)"),
                   (window_ax, "window_tps", "window_min", "window_max",
                    "wall-clock window: sum(comp-1) / (last token - first token)"))
    for ax, value, low_col, high_col, title in definitions:
        for color, (label, t) in zip(_colors(), tables.items()):
            single = t.single["decode_tps"].get("code", np.nan)
            measured = t.concurrent[t.concurrent[value].notna()]
            for series, rows in measured.groupby(measured["cell"].map(t.kinds), sort=False, observed=True):
                style = CASE_STYLE.get(series, "-.")
                n = np.concatenate([[1], rows["concurrency"]])
                agg = np.concatenate([[single], rows[value]])
                low = np.concatenate([[single], rows[low_col]])
                high = np.concatenate([[single], rows[high_col]])
                ax.errorbar(n, agg, yerr=[agg - low, high - agg], color=color, linestyle=style, marker="o",
                            capsize=3, label=f"{label}: {CASE_LABELS.get(series, series)}")
            if np.isfinite(single):
                top = max(int(t.concurrent["concurrency"].max()), 1)
                ax.plot([1, top], [single, single * top], color=color, linestyle=":", linewidth=1, alpha=0.6)
        ax.set_xticks(sorted({1, *(n for t in tables.values() for n in t.concurrent["concurrency"])}))
        ax.set_xlabel("concurrent streams N (N = 1: single-stream code decode)")
        ax.set_title(title, fontsize=10)
        ax.yaxis.set_major_formatter("{x:,.0f}")
        ax.grid(True, alpha=0.3)
    protocol_ax.set_ylabel("aggregate tokens/s")
    protocol_ax.set_ylim(bottom=0)
    protocol_ax.plot([], [], color="grey", linestyle=":", label="linear scaling from 1 stream")
    protocol_ax.legend(fontsize=8)
    fig.suptitle("Aggregate decode against concurrency (mean over rounds, whisker = min–max)")
    return fig


def ttft_distribution(runs: list[RunView]) -> Figure | None:
    """Cumulative share of requests by TTFT: per cell for one run, per run for several."""
    groups = _ttft_groups(runs)
    if not groups:
        return None
    fig, ax = _figure()
    lowest = min(float(v.min()) for v in groups.values())
    highest = max(float(v.max()) for v in groups.values())
    for label, values in groups.items():
        share = np.linspace(0, 1, min(len(values), 500))
        x = np.quantile(values, share)
        p50, p99 = np.quantile(values, [0.5, 0.99])
        ax.step(x, share, where="post", label=f"{label}: p50 {p50:.3f} s, p99 {p99:.3f} s (n={len(values):,})")
    if lowest > 0 and highest / lowest > 20:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter("{x:g}")
    ax.set_xlabel("time to first token, s")
    ax.set_ylabel("share of requests with TTFT ≤ x")
    ax.set_ylim(0, 1.02)
    ax.set_title("TTFT distribution (successful requests, from raw records)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def _ttft_groups(runs: list[RunView]) -> dict[str, np.ndarray]:
    groups = {}
    for run in runs:
        ok = run.records[run.records["ok"] & run.records["ttft_s"].notna()]
        if len(runs) == 1:
            present = set(ok["cell"])
            for cell in (cell for cell in cell_order(run.records) if cell in present):
                groups[str(cell)] = ok.loc[ok["cell"] == cell, "ttft_s"].to_numpy()
        elif not ok.empty:
            groups[run.label] = ok["ttft_s"].to_numpy()
    return groups


def prefill_vs_prompt_size(runs: list[RunView]) -> Figure | None:
    """Prefill t/s against prompt tokens; cache hits drawn at their uncached rate and size."""
    fig, ax = _figure()
    drawn = False
    for color, run in zip(_colors(), runs):
        df = run.records
        ok = df[df["ok"] & df["prompt_tokens"].notna() & ~df["case"].isin(protocol_tables.CONCURRENT_CASES)]
        ok = ok.sample(min(len(ok), SAMPLE), random_state=0) if len(ok) > SAMPLE else ok
        hit = protocol_tables.cache_states(ok) == protocol_tables.HIT
        cold = ok[~hit]
        warm = ok[hit]
        if not cold.empty:
            ax.scatter(cold["prompt_tokens"], cold["prefill_tps"], color=color, marker="o", s=22,
                       label=f"{run.label}: cold (no prefix-cache hit)")
        if not warm.empty:
            ax.scatter(warm["prompt_tokens"] - warm["cached_tokens"], warm["uncached_prefill_tps"], color=color,
                       marker="x", s=22, label=f"{run.label}: prefix-cache hit, uncached part")
        drawn = drawn or not ok.empty
    if not drawn:
        return None
    ax.set_xscale("log")
    ax.set_xlabel("prompt tokens prefilled (usage.prompt_tokens minus cached tokens)")
    ax.set_ylabel("prefill tokens/s = prefilled tokens / TTFT")
    ax.set_title("Prefill rate against prompt size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def timeline(run: RunView) -> Figure | None:
    """Streams in flight and decode tokens/s over the run, each cell's span shaded and named."""
    df = run.records
    series = free_running.timeline(df)
    if series.empty:
        return None
    fig = Figure(figsize=(11, 6.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.fill_between(series["t_s"], series["active_streams"], step="post", alpha=0.6,
                     label="requests in flight (mean per bin)")
    history = run.locust.history
    if history is not None and {"Timestamp", "User Count"} <= set(history.columns):
        top.step(history["Timestamp"] - df["sent_at"].min(), history["User Count"], where="post",
                 color="black", linewidth=1, label="Locust users (from its CSV history)")
    top.set_ylabel("streams")
    top.set_ylim(bottom=0)
    top.legend(fontsize=8, loc="upper left")
    bottom.plot(series["t_s"], series["decode_tps"], color="tab:green", linewidth=1)
    bottom.set_ylabel("decode tokens/s, all streams")
    bottom.set_ylim(bottom=0)
    bottom.yaxis.set_major_formatter("{x:,.0f}")
    bottom.set_xlabel("seconds since the first request")
    bottom.xaxis.set_major_formatter("{x:,.0f}")
    _shade_cells(df, top, bottom)
    fig.suptitle(f"Timeline of {run.label}: requests in flight (top) and decode throughput (bottom), "
                 "shaded by cell")
    return fig


MAX_BOXED_CELLS = 6  # more cells than this share one box per bucket


def by_length(run: RunView) -> Figure | None:
    """TTFT against prompt tokens (left) and decode t/s against completion tokens (right) in the
    free-running cells: every request a dot (a sample of `SAMPLE`), and a box per length bucket
    (`free_running.length_edges`: the report's buckets) and cell, side by side within the bucket."""
    df = run.records
    free = df[df["ok"] & ~df["case"].isin(PROTOCOL_CASES)]
    table = free_running.by_length_table(df)
    if table.empty:
        return None
    cells = list(dict.fromkeys(table["cell"]))
    pooled = len(cells) > MAX_BOXED_CELLS
    fig = Figure(figsize=(13, 5.5), layout="constrained")
    axes = fig.subplots(1, 2)
    titles = {"ttft_s": ("prompt tokens (usage.prompt_tokens)", "TTFT, s", "TTFT against prompt length"),
              "decode_tps": ("completion tokens (usage.completion_tokens)", "decode tokens/s per stream",
                             "Decode against answer length")}
    for ax, (figure, tokens) in zip(axes, free_running.BY_LENGTH):
        rows = free[free[figure].notna() & free[tokens].notna()]
        buckets = table[table["figure"] == figure]
        if buckets.empty:
            ax.set_axis_off()
            continue
        edges = np.unique(np.concatenate([buckets["low"], buckets["high"]]))
        groups = [("all cells", rows)] if pooled else [(cell, rows[rows["cell"] == cell]) for cell in cells]
        for i, (color, (name, group)) in enumerate(zip(_colors(), groups)):
            dots = group.sample(min(len(group), SAMPLE // len(groups)), random_state=0)
            few = len(rows) < 2000  # a small run's dots stay readable, a large one's do not hide the boxes
            ax.scatter(dots[tokens], dots[figure], s=12 if few else 4, alpha=0.5 if few else 0.2, color=color,
                       linewidths=0)
            values, positions, widths = [], [], []
            for low, high in zip(edges[:-1], edges[1:]):
                inside = group[(group[tokens] >= low) & (group[tokens] < high)][figure].to_numpy()
                if not inside.size:
                    continue
                share = (np.log(high) - np.log(low)) / len(groups)  # each cell's slice of the bucket, log scale
                values.append(inside)
                positions.append(np.exp(np.log(low) + share * (i + 0.5)))
                widths.append(positions[-1] * share * 0.7)
            if values:
                ax.boxplot(values, positions=positions, widths=widths, whis=(5, 95), showfliers=False,
                           manage_ticks=False, patch_artist=True,
                           boxprops={"facecolor": color, "alpha": 0.35, "edgecolor": color},
                           medianprops={"color": color, "linewidth": 2},
                           whiskerprops={"color": color}, capprops={"color": color})
            ax.plot([], [], color=color, linewidth=6, alpha=0.5, label=f"{name} (n={len(group):,})")
        for edge in edges:
            ax.axvline(edge, color="grey", linewidth=0.5, alpha=0.4)
        xlabel, ylabel, title = titles[figure]
        ax.set_xscale("log", base=2)
        ax.set_xticks(edges, [f"{int(e):,}" for e in edges], fontsize=8, rotation=45 if len(edges) > 6 else 0)
        ax.minorticks_off()
        ax.set_xlim(edges[0], edges[-1])
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter("{x:,.3g}" if figure == "ttft_s" else "{x:,.0f}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"By length, free-running cells of {run.label}: a dot per request; box per bucket = "
                 "p25–p75 with the median, whiskers p5–p95")
    return fig


VERDICT_COLORS = {"held": "tab:green", "broke": "tab:red", "close": "tab:orange", "failed": "black"}


def search(run: RunView) -> Figure | None:
    """A capacity search: each SLO figure the search judged against the level (whisker = its
    bootstrap range, colour = the level's verdict), the SLO's line, and the capacity found."""
    result = run.manifest.get("search") or {}
    levels = pd.DataFrame(result.get("levels") or [])
    slo = result.get("slo") or {}
    panels = [(key, label, target) for key, label, target in (
        ("ttft", f"TTFT p{slo.get('ttft_p') or 0:g}, s", slo.get("ttft_s") if slo.get("ttft_p") else None),
        ("decode", f"decode t/s, p{100 - (slo.get('decode_p') or 0):g} (slow tail)",
         slo.get("decode_tps") if slo.get("decode_p") else None),
        ("goodput", "share of requests meeting the targets", slo.get("goodput")),
    ) if target is not None]
    if levels.empty or not panels:
        return None
    levels = levels.sort_values("value")
    users = result["variable"] == "users"
    fig = Figure(figsize=(6 + 3 * len(panels), 5), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(panels), sharex=True))
    columns = {"ttft": ("ttft_s", "ttft_low", "ttft_high"), "decode": ("decode_tps", "decode_low", "decode_high"),
               "goodput": ("goodput", "goodput_low", "goodput_high")}
    for ax, (key, label, target) in zip(axes, panels):
        value, low, high = (levels[col].astype(float).to_numpy() for col in columns[key])
        ax.plot(levels["value"], value, color="grey", linewidth=1, zorder=1)
        for verdict, rows in levels.groupby("verdict", sort=False):
            mask = levels["verdict"].to_numpy() == verdict
            ax.errorbar(rows["value"], value[mask], yerr=[value[mask] - low[mask], high[mask] - value[mask]],
                        fmt="o", capsize=4, color=VERDICT_COLORS.get(verdict, "grey"), label=verdict, zorder=2)
        ax.axhline(target, color="tab:red", linestyle="--", linewidth=1, label=f"SLO {target:g}")
        if result.get("best") is not None:
            ax.axvline(result["best"], color="tab:green", linestyle=":", linewidth=1.5,
                       label=f"capacity {result['best']:g} {'users' if users else 'req/s'}")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("concurrent users (closed loop)" if users else "arrival rate, req/s (open loop)")
        ax.set_ylim(bottom=0)
        ax.set_xticks(levels["value"])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Capacity search of {run.label}: SLO figures per level (whisker = "
                 f"{search_module.INTERVAL[0]:.0%}-{search_module.INTERVAL[1]:.0%} bootstrap range)")
    return fig


def sweep(run: RunView) -> Figure | None:
    """A server sweep's chart (`loadlib.report.sweep.sweep_plot`) of its table of configurations,
    the figures the summary's sweep table gives; None for a run that is not a sweep."""
    return sweep_plot(run.sweep_table) if run.sweep_table is not None else None


def _shade_cells(df: pd.DataFrame, top, bottom) -> None:
    """Alternating grey bands, one per cell, named above the top chart when wide enough to read."""
    origin = df["sent_at"].min()
    spans = df.groupby("cell", observed=True).agg(start=("sent_at", "min"), end=("end_at", "max"))
    spans = spans.reindex(cell_order(df))
    readable = (spans["end"].max() - origin) / 40
    for i, (cell, span) in enumerate(spans.iterrows()):
        start, end = span["start"] - origin, span["end"] - origin
        for ax in (top, bottom):
            ax.axvspan(start, end, color="grey", alpha=0.07 if i % 2 else 0.15, linewidth=0)
        if end - start >= readable:
            top.text((start + end) / 2, 1.01, str(cell), transform=top.get_xaxis_transform(), ha="center",
                     va="bottom", fontsize=8, rotation=30 if len(spans) > 6 else 0)


def _figure():
    fig = Figure(figsize=(10, 5.5), layout="constrained")
    return fig, fig.subplots()


def _colors() -> Iterator[str]:
    """Matplotlib's default colour cycle, one colour per run."""
    return itertools.cycle(f"C{i}" for i in range(10))


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
