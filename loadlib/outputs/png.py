"""PNG charts of one or several runs (`python -m analysis plot`): every chart declared in
`loadlib.report.charts` that the runs have data for, the same charts report.html draws, each drawn
by one generic function. A figure's panels (a run's timeline, a search's levels) share one file.

Uses matplotlib's object API (no pyplot, no global backend state), so it runs headless.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from loadlib.report import charts
from loadlib.report.charts import Chart, ChartRun, drawn, stacked

if TYPE_CHECKING:
    from loadlib.outputs import Reading
    from loadlib.run_view import RunView

SAMPLE = 20_000  # points drawn per run of one point per request; more adds ink, not information
LINE = {"solid": "-", "dashed": "--", "dotted": ":", "dashdot": "-."}
MARKED = 30  # a line of at most this many points shows them


def render(reading: Reading) -> str:
    """Writes the charts of the reading's views into the folder `reading.out`; their paths, one a line."""
    return "\n".join(str(path) for path in plot(reading.views, reading.out))


def plot(runs: Sequence[RunView], out_dir: str | Path) -> list[Path]:
    """Writes every figure that the runs have data for; returns the files written. A run of
    several servers is drawn as its servers (`RunView.by_target`), as report.html shows it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    whole = [ChartRun(run) for run in runs]
    shown = [ChartRun(view, sample=_sample(view.records))
             for run in runs for view in run.by_target(prefixed=len(runs) > 1)]
    written = []
    for figure, declared in _figures(charts.CHARTS).items():
        over = whole if declared[0].whole_run else shown
        pictures = ([(figure.format(run=_safe(run.label)), run.label, [run]) for run in over] if "{run}" in figure
                    else [(figure, "", over)])
        for name, label, drawn_runs in pictures:
            panels = [found for chart in declared if (found := drawn(chart, drawn_runs)) is not None]
            if panels:
                figure_of(panels, label).savefig(out / f"{name}.png", dpi=110)
                written.append(out / f"{name}.png")
    return written


def figure_of(panels: Sequence[dict[str, Any]], label: str = "") -> Figure:
    """The panels (`charts.drawn`'s) as one picture: stacked where they share their x axis, else
    two a row; titled with the run's label where the picture is one run's."""
    stack = stacked(panels)
    rows, cols = (len(panels), 1) if stack else (math.ceil(len(panels) / 2), 2)
    fig = Figure(figsize=(11, 1.5 + 3.6 * rows) if stack else (14, 5.2 * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, sharex=stack and len(panels) > 1, squeeze=False).ravel())
    for i, (ax, chart) in enumerate(zip(axes, panels)):
        draw(ax, chart, label_bands=i == 0, width=150 if stack else 95)
        if stack:
            ax.label_outer(remove_inner_ticks=True)  # one x axis, named under the last panel
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    if label:
        fig.suptitle(label)
    return fig


def draw(ax: Axes, chart: dict[str, Any], label_bands: bool = True, width: int = 150) -> None:
    """One chart on `ax`: its series by kind, whiskers and text, its marks, axes, title (lines of at
    most `width` characters) and legend."""
    right = ax.twinx() if chart["y2"] is not None else None
    for series in chart["series"]:
        _series(right if series["right"] and right is not None else ax, series)
    _marks(ax, chart["marks"], label_bands)
    x, y = chart["x"], chart["y"]
    if x["log"]:
        ax.set_xscale("log", base=x["log"])
        ax.xaxis.set_major_formatter("{x:,.0f}" if x["log"] == 2 else "{x:g}")
    if x.get("ticks"):
        ticks = x["ticks"]
        ax.set_xticks(range(len(ticks)), ticks, rotation=30 if sum(map(len, ticks)) > 60 else 0,
                      ha="right" if sum(map(len, ticks)) > 60 else "center", fontsize=8)
        ax.set_xlim(-0.5, len(ticks) - 0.5)
    for axis, scale in ((ax, y), (right, chart["y2"])):
        if axis is None:
            continue
        axis.set_ylabel(scale["title"])
        if scale["log"]:
            axis.set_yscale("log", base=scale["log"])
        if scale["zero"] or any(s["kind"] == "bar" for s in chart["series"]):
            axis.set_ylim(bottom=0)
        if not scale["log"]:
            axis.yaxis.set_major_formatter(_tick)
        axis.margins(y=0.12 if any("text" in s for s in chart["series"]) else 0.05)
    ax.set_xlabel(x["title"])
    ax.set_title(textwrap.fill(chart["title"], width), fontsize=9)
    ax.grid(True, alpha=0.3)
    handles = [h for axis in (ax, right) if axis is not None for h in axis.get_legend_handles_labels()[0]]
    if len(handles) > 1:
        ax.legend(handles=handles, fontsize=7, ncols=1 + len(handles) // 12)


def _series(ax: Axes, series: dict[str, Any]) -> None:
    x = np.asarray(series["x"], dtype="float64")
    y = np.array([np.nan if v is None else v for v in series["y"]], dtype="float64")
    color, line, label = series["color"], LINE[series["style"]], series["label"] or None
    kind = series["kind"]
    if kind == "bar":
        ax.bar(x, np.nan_to_num(y), series["width"], color=color, label=label)
    elif kind == "span":
        end = np.array([np.nan if v is None else v for v in series["end"]], dtype="float64")
        ax.barh(y, end - x, left=x, height=0.6, color=color, label=label)
    elif kind == "scatter":
        few = len(x) < 2000  # a small run's dots stay readable, a large one's do not hide the lines
        solid = series["style"] == "solid"
        ax.scatter(x, y, s=16 if few else 4, alpha=0.6 if few else 0.25, label=label, linewidths=0.8,
                   facecolors=color if solid else "none", edgecolors=color, zorder=3)
    elif kind == "step":
        ax.step(x, y, where="post", color=color, linestyle=line, linewidth=1.2, label=label)
    else:
        ax.plot(x, y, color=color, linestyle=line, linewidth=1.2, label=label,
                marker="o" if len(x) <= MARKED else None, markersize=4)
    if "low" in series and "high" in series:
        low = np.array([np.nan if v is None else v for v in series["low"]], dtype="float64")
        high = np.array([np.nan if v is None else v for v in series["high"]], dtype="float64")
        whiskers = np.nan_to_num(np.vstack([y - low, high - y]), nan=0.0).clip(min=0)
        ax.errorbar(x, y, yerr=whiskers, fmt="none", ecolor="black" if kind == "bar" else color, capsize=3,
                    linewidth=1)
    for xi, yi, text in zip(x, y, series.get("text") or ()):
        if text is not None:
            missing = not np.isfinite(yi)
            ax.annotate(text, (xi, 0 if missing else yi), xytext=(0, 3), textcoords="offset points", ha="center",
                        va="bottom", fontsize=8, color="tab:red" if missing else "black",
                        rotation=90 if missing else 0)


def _marks(ax: Axes, marks: list[dict[str, Any]], label_bands: bool) -> None:
    bands = [m for m in marks if m["axis"] == "x" and m["to"] is not None]
    readable = (max((m["to"] for m in bands), default=0) - min((m["at"] for m in bands), default=0)) / 40
    for i, mark in enumerate(bands):
        ax.axvspan(mark["at"], mark["to"], color="grey", alpha=0.07 if i % 2 else 0.15, linewidth=0)
        if label_bands and mark["to"] - mark["at"] >= readable:
            ax.text((mark["at"] + mark["to"]) / 2, 0.98, mark["label"], transform=ax.get_xaxis_transform(),
                    ha="center", va="top", fontsize=7, color="dimgrey", rotation=30 if len(bands) > 6 else 0)
    for mark in marks:
        if mark["to"] is not None:
            continue
        line = ax.axvline if mark["axis"] == "x" else ax.axhline
        line(mark["at"], color=mark["color"], linestyle=LINE[mark["style"]], linewidth=1.2, label=mark["label"])


def _tick(value: float, _position: int) -> str:
    """A tick's value: thousands grouped, small values to 4 significant digits."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _sample(df: pd.DataFrame) -> pd.DataFrame | None:
    """At most `SAMPLE` of the records, for the charts of one point per request; None: all of them."""
    return df.sample(SAMPLE, random_state=0) if len(df) > SAMPLE else None


def _figures(charts: Sequence[Chart]) -> dict[str, list[Chart]]:
    found: dict[str, list[Chart]] = {}
    for chart in charts:
        found.setdefault(chart.figure, []).append(chart)
    return found


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
