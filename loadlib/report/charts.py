"""Every chart, declared once as data: its title, axes and units, how it is drawn (line, step,
scatter, bar), its series (each a function of the run that gives points, from `loadlib.figures`),
which runs it applies to, and the picture it is a panel of. report.html (`assets/charts.js` with
uPlot), the PNGs (`loadlib/outputs/png.py`, matplotlib) and the live page (the same `charts.js`) each
draw these declarations with one generic renderer, from `drawn`'s output; so a new chart is one
`Chart` in `CHARTS`, and every medium shows it.

A series' function returns a frame of points: `x`, `y`, and optionally `low`/`high` (a whisker
per point), `text` (written at the point), `end` (a span's end on x: a lane's turn from its start
to its end) and `name` (one line per name: per cell, per verdict).
`drawn` turns a chart over one run or several into plain values: colours (one per run when
several, else one per name or series), dashes, a categorical axis' positions, grouped bars.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Sequence

import numpy as np
import pandas as pd

from loadlib.figures import free_running, sessions
from loadlib.figures import series as points
from loadlib.figures.capacity import level_table
from loadlib.modes.search import level_text
from loadlib.report import text
from loadlib.report.protocol import CASE_LABELS, PROTOCOL_CASES, scenario_label
from loadlib.report.sections import ALL_STREAMS
from loadlib.sweep.launch import OK
from loadlib.truth.energy import ALL as ALL_GPUS

if TYPE_CHECKING:
    from loadlib.run_view import RunView

Kind = Literal["line", "step", "scatter", "bar", "span"]  # span: a bar across x, from `x` to `end`, at `y`
Style = Literal["solid", "dashed", "dotted", "dashdot"]
STYLES: tuple[Style, ...] = ("solid", "dashed", "dotted", "dashdot")
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22")
GREY = "#8a8f98"  # a series or mark that is no run's own (live first tokens, a search's levels joined)
VERDICT_COLORS = {"held": "#2ca02c", "broke": "#d62728", "close": "#ff7f0e", "failed": "#000000"}
DIGITS = 4  # decimals kept of a drawn value: more adds bytes, not ink


@dataclass(frozen=True)
class Axis:
    """An axis: what it measures and in which unit; a log scale's base (0: linear), or a log scale
    only where the values span more than `log_beyond` times; whether its scale starts at 0."""

    label: str
    unit: str = ""
    log: int = 0
    zero: bool = False
    log_beyond: float = 0.0  # values (all positive) whose largest is more than this times the smallest: log 10

    @property
    def title(self) -> str:
        return f"{self.label}, {self.unit}" if self.unit else self.label


@dataclass
class ChartRun:
    """One run as the charts read it: its view (`loadlib.run_view.RunView`: its label, records,
    figures, scrapes and Locust's own CSV history); where a medium draws fewer points than
    requests, the records it draws one point each for (`sample`: report.html's thinned requests,
    whose rows its points then name); the live page's running series (`live`, seconds since the
    first request: `t_s`, `tokens_per_s`, `in_flight`, `ttft` as [t, s])."""

    view: RunView
    sample: pd.DataFrame | None = None
    live: Mapping[str, list[Any]] | None = None
    _shared: dict[Callable[["ChartRun"], Any], Any] = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        return self.view.label

    @property
    def df(self) -> pd.DataFrame:
        return self.view.records

    @property
    def requests(self) -> pd.DataFrame:
        """The records a series of one point per request draws."""
        return self.df if self.sample is None else self.sample

    @cached_property
    def origin(self) -> float:
        return points.origin(self.df)

    def shared(self, compute: Callable[["ChartRun"], Any]) -> Any:
        """`compute(self)`, computed once for every series and chart that asks."""
        if compute not in self._shared:
            self._shared[compute] = compute(self)
        return self._shared[compute]


Points = Callable[[ChartRun], "pd.DataFrame | None"]


@dataclass(frozen=True)
class Series:
    """What one legend entry (or one per `name` of its points) draws: its points, its kind (the
    chart's by default), its dash (for points: "solid" filled, else hollow), whether it is read
    on the chart's second y axis, a fixed colour (or one per name), and whether it is one point
    per request (a medium may draw a sample of the requests)."""

    label: str
    points: Points
    kind: Kind | None = None
    style: Style = "solid"
    right: bool = False
    color: str | Mapping[str, str] | None = None
    per_request: bool = False


@dataclass(frozen=True)
class Mark:
    """A line across the plot at `at` on `axis`, or a band from `at` to `to`, labelled."""

    axis: Literal["x", "y"]
    at: float
    to: float | None = None
    label: str = ""
    color: str | None = None
    style: Style = "dashed"


@dataclass(frozen=True)
class Chart:
    """One chart. `figure` is the picture it is a panel of: the PNG's file name ("{run}" in it:
    one picture per run) and the charts report.html lays out together (zoomed together where they
    share their x axis). `applies` says which runs it is for (a chart no run has points for is
    not drawn anywhere); `whole_run`: drawn from each run given, not from each of its servers (a
    sweep's configurations); `live`: also on the live page, every second."""

    id: str
    title: str
    figure: str
    x: Axis
    y: Axis
    series: tuple[Series, ...]
    kind: Kind = "line"
    y2: Axis | None = None
    marks: Callable[[ChartRun], list[Mark]] | None = None
    applies: Callable[[ChartRun], bool] = lambda run: True
    whole_run: bool = False
    live: bool = False


# --- drawing: a chart over runs as plain values ----------------------------------------------------

def drawn(chart: Chart, runs: Sequence[ChartRun]) -> dict[str, Any] | None:
    """The chart over `runs` as every renderer reads it; None where no run it applies to has a point.

    Several runs: each its colour, its label in front of each series'; one run: a colour per name
    (a series split by name) or per series, in order of appearance, unless the declaration fixes one.
    Points without a value are left out unless they carry text (not on a log axis: nor at x <= 0);
    a series of text alone is not drawn. Names on the x axis become
    positions 0, 1, ... (`x.ticks` names them); bars of several series sit side by side there."""
    several = len(runs) > 1
    keys: dict[str, int] = {}
    found: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    sampled: list[dict[str, Any]] = []
    for index, run in enumerate(runs):
        if not chart.applies(run):
            continue
        for declared in chart.series:
            frame = declared.points(run)
            if frame is None or frame.empty:
                continue
            split = "name" in frame.columns
            parts = frame.groupby("name", sort=False) if split else [(None, frame)]
            for order, (name, part) in enumerate(parts):
                entry = _series_entry(declared, chart, part, run, str(name) if split else None)
                if entry is None:
                    continue
                key = str(name) if split else declared.label
                own = index if several else keys.setdefault(key, len(keys))  # a run's colour, or a name's
                entry["color"] = _color(declared.color, name) or PALETTE[own % len(PALETTE)]
                if several and split and declared.style == "solid" and entry["kind"] != "bar":
                    entry["style"] = STYLES[order % len(STYLES)]
                entry["run"] = index
                entry["label"] = ": ".join(text for text in (run.label if several else "", entry["label"]) if text)
                found.append(entry)
            if declared.per_request and run.sample is not None and len(run.sample) < len(run.df):
                sampled.append({"run": index, "shown": len(run.sample), "total": len(run.df)})
        for mark in chart.marks(run) if chart.marks is not None else []:
            marks.append({"axis": mark.axis, "at": _value(mark.at), "to": _value(mark.to), "label": mark.label,
                          "style": mark.style, "run": index,
                          "color": mark.color or (PALETTE[index % len(PALETTE)] if several else GREY)})
    if not found:
        return None
    x = {**_axis(chart.x, [v for entry in found for v in entry["x"]]), **_categories(found)}
    _side_by_side(found)
    y = [v for entry in found if not entry["right"] for key in ("y", "low", "high") for v in entry.get(key) or ()]
    return {"id": chart.id, "title": chart.title, "figure": chart.figure, "kind": chart.kind, "x": x,
            "y": _axis(chart.y, y), "y2": _axis(chart.y2, []) if chart.y2 is not None else None,
            "series": found, "marks": marks, "sampled": list({s["run"]: s for s in sampled}.values())}


def drawn_charts(runs: Sequence[ChartRun], whole_runs: Sequence[ChartRun] = (), live: bool = False
                 ) -> list[dict[str, Any]]:
    """Every declared chart (`CHARTS`) that the runs have points for, in declaration order: over
    `runs`, a whole-run chart over `whole_runs`; with `live` only the live page's."""
    found = []
    for chart in CHARTS:
        if live and not chart.live:
            continue
        shown = drawn(chart, whole_runs if chart.whole_run else runs)
        if shown is not None:
            found.append(shown)
    return found


def figures(found: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drawn charts grouped by the figure they are panels of, in order: `{"figure", "stacked",
    "charts"}`; stacked panels share their x axis' range (`x.range`)."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for chart in found:
        grouped.setdefault(chart["figure"], []).append(chart)
    for panels in grouped.values():
        if len(panels) > 1 and stacked(panels):  # one x axis: the same range in every panel
            marks = [m for p in panels for m in p["marks"] if m["axis"] == "x"]
            ends = [v for p in panels for s in p["series"] for key in ("x", "end") for v in s.get(key) or ()] + \
                   [v for m in marks for v in (m["at"], m["to"]) if v is not None]
            for p in panels:
                p["x"]["range"] = [min(ends), max(ends)]
    return [{"figure": name, "stacked": stacked(panels), "charts": panels} for name, panels in grouped.items()]


def stacked(panels: Sequence[dict[str, Any]]) -> bool:
    """Whether a figure's panels stack, one above the other (and zoom together): one panel, or
    panels sharing their x axis (a timeline, a search's levels); else they go two a row."""
    first = panels[0]["x"]
    return len(panels) == 1 or all(
        not p["x"].get("ticks") and (p["x"]["title"], p["x"]["log"]) == (first["title"], first["log"]) for p in panels)


def _series_entry(declared: Series, chart: Chart, part: pd.DataFrame, run: ChartRun, name: str | None
                  ) -> dict[str, Any] | None:
    has_text = part["text"].notna().to_numpy() if "text" in part else np.zeros(len(part), dtype=bool)
    y = pd.to_numeric(part["y"], errors="coerce").to_numpy(dtype="float64")
    keep = (np.isfinite(y) | has_text) & pd.notna(part["x"]).to_numpy()
    if chart.x.log:
        keep &= pd.to_numeric(part["x"], errors="coerce").to_numpy(dtype="float64") > 0
    if not np.isfinite(y[keep]).any():  # text alone (a status) only stands beside values
        return None
    part = part[keep]
    entry: dict[str, Any] = {"label": ": ".join(p for p in (name, declared.label) if p),
                             "kind": declared.kind or chart.kind, "style": declared.style, "right": declared.right,
                             "x": _values(part["x"]), "y": _values(part["y"])}
    for optional in ("low", "high", "text", "end"):
        if optional in part:
            entry[optional] = _values(part[optional])
    if declared.per_request and run.sample is not None:
        entry["rows"] = [int(i) for i in part.index]
    return entry


def _color(fixed: str | Mapping[str, str] | None, name: Any) -> str | None:
    if isinstance(fixed, str) or fixed is None:
        return fixed
    return fixed.get(str(name))


def _axis(axis: Axis, values: Sequence[Any]) -> dict[str, Any]:
    log = axis.log
    if axis.log_beyond:
        numbers = [v for v in values if isinstance(v, (int, float))]
        wide = bool(numbers) and min(numbers) > 0 and max(numbers) > axis.log_beyond * min(numbers)
        log = 10 if wide else 0
    return {"label": axis.label, "unit": axis.unit, "title": axis.title, "log": log, "zero": axis.zero and not log}


def _categories(found: list[dict[str, Any]]) -> dict[str, Any]:
    """Names on the x axis as positions, `ticks` naming them in order of appearance."""
    if not any(isinstance(x, str) for entry in found for x in entry["x"]):
        return {}
    ticks = list(dict.fromkeys(str(x) for entry in found for x in entry["x"]))
    for entry in found:
        entry["x"] = [ticks.index(str(x)) for x in entry["x"]]
    return {"ticks": ticks}


def _side_by_side(found: list[dict[str, Any]]) -> None:
    """Bars of several series at one position: each its slice of 0.8 of the gap, side by side."""
    bars = [entry for entry in found if entry["kind"] == "bar"]
    width = 0.8 / max(len(bars), 1)
    for i, entry in enumerate(bars):
        shift = (i - (len(bars) - 1) / 2) * width
        entry["x"] = [round(x + shift, DIGITS) for x in entry["x"]]
        entry["width"] = round(width, DIGITS)


def _values(column: pd.Series) -> list[Any]:
    return [_value(v) for v in column.tolist()]


def _value(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    number = float(value)
    return round(number, DIGITS) if math.isfinite(number) else None


# --- the series: points from `loadlib.figures` ------------------------------------------------------

def _frame(x: Any, y: Any, **more: Any) -> pd.DataFrame:
    return pd.DataFrame({"x": x, "y": y, **more})


def _timeline(run: ChartRun) -> pd.DataFrame:
    return free_running.timeline(run.df)


def _cell_bands(run: ChartRun) -> list[Mark]:
    spans = points.cell_spans(run.df, run.origin)
    return [Mark("x", row.start, row.end, str(row.label)) for row in spans.itertuples()]


def _live(key: str) -> Points:
    def live_points(run: ChartRun) -> pd.DataFrame | None:
        return _frame(run.live["t_s"], run.live[key]) if run.live else None
    return live_points


def _live_ttft(run: ChartRun) -> pd.DataFrame | None:
    found = (run.live or {}).get("ttft") or []
    return _frame([t for t, _v in found], [v for _t, v in found]) if found else None


def _locust_users(run: ChartRun) -> pd.DataFrame | None:
    history = run.view.locust.history
    if history is None or not {"Timestamp", "User Count"} <= set(history.columns) or run.df.empty:
        return None
    return _frame(history["Timestamp"] - run.origin, history["User Count"])


def _server(run: ChartRun) -> pd.DataFrame:
    return points.server_timeline(run.view.scrapes, run.origin)


def _server_gauge(key: str) -> Points:
    """One gauge of the server timeline, by source where the run scraped several."""
    def gauge(run: ChartRun) -> pd.DataFrame:
        found = run.shared(_server)
        frame = _frame(found["t_s"], found[key])
        return frame.assign(name=found["source"]) if found["source"].nunique() > 1 else frame
    return gauge


def _distribution(figure: str) -> Points:
    return lambda run: points.percentile_curves(run.df, figure)


def _single_code(run: ChartRun) -> float:
    single = run.view.tables.single
    return float(single["decode_tps"].get("code", np.nan)) if not single.empty else math.nan


def _aggregate(value: str, low: str, high: str) -> Points:
    """The protocol's aggregate (or the wall-clock window's) against N per kind of cell, with the
    single-stream code decode at N = 1; whiskers min-max over rounds."""
    def aggregate(run: ChartRun) -> pd.DataFrame:
        tables = run.view.tables
        single = _single_code(run)
        rows = tables.concurrent[tables.concurrent[value].notna()]
        parts = []
        for kind, own in rows.groupby(rows["cell"].map(tables.kinds), sort=False):
            first = [] if math.isnan(single) else [single]
            parts.append(pd.DataFrame({
                "x": [1] * len(first) + own["concurrency"].tolist(), "y": first + own[value].tolist(),
                "low": first + own[low].tolist(), "high": first + own[high].tolist(),
                "name": CASE_LABELS.get(str(kind), str(kind))}))
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return aggregate


def _linear_scaling(run: ChartRun) -> pd.DataFrame | None:
    single, concurrent = _single_code(run), run.view.tables.concurrent
    if math.isnan(single) or concurrent["aggregate_tps"].isna().all():
        return None
    top = int(concurrent["concurrency"].max())
    return _frame([1, top], [single, single * top])


def _steady(run: ChartRun) -> pd.DataFrame | None:
    steady = run.view.steady
    if steady.empty:
        return None
    rows = steady[steady["in_flight"].notna() & steady["decode_tps"].notna()].sort_values("in_flight", kind="stable")
    return _frame(rows["in_flight"], rows["decode_tps"])


def _decode_per_scenario(run: ChartRun) -> pd.DataFrame | None:
    single = run.view.tables.single
    if single.empty:
        return None
    decode = single["decode_tps"]
    return _frame([scenario_label(s) for s in single.index], decode, low=single["decode_min"],
                  high=single["decode_max"], text=[f"{v:.1f}" if np.isfinite(v) else None for v in decode])


def _acceptance_curves(run: ChartRun) -> pd.DataFrame | None:
    """Each cell's (and, from the requests' histograms, scenario's) expected tokens per verify step
    at each draft length."""
    table = run.view.positions
    if table.empty:
        return None
    return _frame(table["position"], table["expected_tokens"],
                  name=text.cell_labels(table["cell"], table["scenario"]))


def _tokens_per_joule(run: ChartRun) -> pd.DataFrame | None:
    """Each cell's completion tokens per joule, every GPU read together (its one GPU's where one was read)."""
    table = run.view.energy
    together = table[table["gpu"] == ALL_GPUS] if (table["gpu"] == ALL_GPUS).any() else table
    if together["tokens_per_joule"].notna().sum() == 0:
        return None
    value = together["tokens_per_joule"].astype(float)
    return _frame(text.cell_labels(together["cell"], together["scenario"]),
                  value, text=[f"{v:.2f}" if np.isfinite(v) else None for v in value])


def _search(run: ChartRun) -> Mapping[str, Any]:
    return run.view.manifest.get("search") or {}


def _levels(run: ChartRun) -> pd.DataFrame:
    return pd.DataFrame(_search(run).get("levels") or []).sort_values("value", kind="stable")


@dataclass(frozen=True)
class SloFigure:
    """A figure a capacity search judges each level by: its columns in the manifest's levels, and,
    from the search's SLO, its target (None: not judged) and its name."""

    value: str
    low: str
    high: str
    target: Callable[[Mapping[str, Any]], float | None]
    name: Callable[[Mapping[str, Any]], str]


SLO_FIGURES = {
    "ttft": SloFigure("ttft_s", "ttft_low", "ttft_high", lambda slo: slo.get("ttft_s") if slo.get("ttft_p") else None,
                      lambda slo: f"TTFT p{slo.get('ttft_p') or 0:g}"),
    "decode": SloFigure("decode_tps", "decode_low", "decode_high",
                        lambda slo: slo.get("decode_tps") if slo.get("decode_p") else None,
                        lambda slo: f"decode p{100 - (slo.get('decode_p') or 0):g} (slow tail)"),
    "goodput": SloFigure("goodput", "goodput_low", "goodput_high", lambda slo: slo.get("goodput"),
                         lambda slo: "goodput"),
}


def _slo(run: ChartRun) -> Mapping[str, Any]:
    return _search(run).get("slo") or {}


def _search_judged(key: str) -> Callable[[ChartRun], bool]:
    return lambda run: bool(_search(run).get("levels")) and SLO_FIGURES[key].target(_slo(run)) is not None


def _search_line(key: str) -> Points:
    """The levels' figure joined in order of level, named as the SLO judges it ("TTFT p90")."""
    figure = SLO_FIGURES[key]

    def line(run: ChartRun) -> pd.DataFrame:
        levels = run.shared(_levels)
        return _frame(levels["value"], levels[figure.value].astype(float), name=figure.name(_slo(run)))
    return line


def _search_verdicts(key: str) -> Points:
    """Each level's figure with its bootstrap range, named by the level's verdict."""
    figure = SLO_FIGURES[key]

    def judged(run: ChartRun) -> pd.DataFrame:
        levels = run.shared(_levels)
        return _frame(levels["value"], levels[figure.value].astype(float), low=levels[figure.low].astype(float),
                      high=levels[figure.high].astype(float), name=levels["verdict"].astype(str))
    return judged


def _search_marks(key: str) -> Callable[[ChartRun], list[Mark]]:
    """The SLO's target across, and the capacity the search found (its best level) down."""
    def marks(run: ChartRun) -> list[Mark]:
        search, target = _search(run), SLO_FIGURES[key].target(_slo(run))
        found = [Mark("y", float(target), label=f"SLO {target:g}", color=VERDICT_COLORS["broke"])]
        if search.get("best") is not None:
            best = level_text(search.get("variable") or "rate", search["best"])
            found.append(Mark("x", float(search["best"]), label=f"capacity {best}",
                              color=VERDICT_COLORS["held"], style="dotted"))
        return found
    return marks


def _level_table(run: ChartRun) -> pd.DataFrame:
    return level_table(run.df, _search(run), run.view.steady_cells).sort_values("value", kind="stable")


def _level_column(column: str) -> Points:
    def level(run: ChartRun) -> pd.DataFrame:
        levels = run.shared(_level_table)
        return _frame(levels["value"], levels[column])
    return level


def _by_length_table(run: ChartRun) -> pd.DataFrame:
    return free_running.by_length_table(run.df)


def _by_length(figure: str, percentile: str) -> Points:
    """A percentile of `figure` per length bucket of the report's table, at the bucket's middle
    (geometric: the axis is log 2)."""
    def by_length(run: ChartRun) -> pd.DataFrame:
        table = run.shared(_by_length_table)
        rows = table[table["figure"] == figure]
        middle = np.sqrt(rows["low"].astype(float) * rows["high"].astype(float))
        return _frame(middle, rows[percentile], name=rows["cell"].astype(str))
    return by_length


def _by_length_requests(figure: str, tokens: str) -> Points:
    """Every successful request of the free-running cells at its length, named by its cell."""
    def requests(run: ChartRun) -> pd.DataFrame:
        df = run.requests
        free = df[df["ok"] & ~df["case"].isin(PROTOCOL_CASES) & df[figure].notna() & df[tokens].notna()]
        return _frame(free[tokens], free[figure], name=free["cell"].astype(str))
    return requests


def _sweep_bars(column: str, ci: str | None = None) -> Points:
    """One bar per configuration in the order run; one that did not serve has its status instead."""
    def bars(run: ChartRun) -> pd.DataFrame:
        table = run.view.sweep_table
        frame = _frame(table["label"].astype(str), table[column].astype(float),
                       text=[None if status == OK else str(status) for status in table["status"]])
        if ci is not None:
            frame = frame.assign(low=table[f"{ci}_ci_low"].astype(float), high=table[f"{ci}_ci_high"].astype(float))
        return frame
    return bars


def _is_sweep(run: ChartRun) -> bool:
    return bool(run.view.manifest.get("sweep"))


def _sweep_has(column: str, present: bool = True) -> Callable[[ChartRun], bool]:
    return lambda run: _is_sweep(run) and bool(run.view.sweep_table[column].notna().any()) == present


SECONDS = Axis("time since the first request", "s")
STREAMS = Axis("concurrent streams N")
LEVEL = Axis("level (users or agent sessions, closed loop; or offered req/s, open loop)")
CONFIGURATION = Axis("configuration")
PER_STREAM = Axis("decode", "t/s per stream", zero=True)  # a request's decode; ALL_STREAMS: every stream's per second


def _sweep_chart(id_: str, title: str, column: str, axis: Axis, ci: str | None = None,
                 applies: Callable[[ChartRun], bool] = _is_sweep) -> Chart:
    return Chart(id_, title, "sweep_{run}", CONFIGURATION, axis, (Series(axis.label, _sweep_bars(column, ci)),),
                 kind="bar", applies=applies, whole_run=True)


def _search_chart(key: str, title: str, axis: Axis) -> Chart:
    return Chart(f"search-{key}", title, "search_{run}", LEVEL, axis,
                 (Series("", _search_line(key), kind="line", color=GREY),
                  Series("", _search_verdicts(key), color=VERDICT_COLORS)),
                 kind="scatter", marks=_search_marks(key), applies=_search_judged(key))


def _by_length_chart(figure: str, tokens: str, y: Axis) -> Chart:
    """`figure` against `tokens` in the free-running cells: each request, and the report's buckets."""
    by = tokens.replace("_", " ")
    title = (f"By length, free-running cells: {y.label} by {by} (a dot per request; p50 solid and p90 dashed per "
             "bucket of the report's table, at its middle)")
    return Chart(f"by-length-{figure.split('_')[0]}", title, "by_length_{run}", Axis(f"{by} (usage)", log=2), y,
                 (Series("each request", _by_length_requests(figure, tokens), kind="scatter", per_request=True),
                  Series("p50", _by_length(figure, "p50")), Series("p90", _by_length(figure, "p90"), style="dashed")))


CHARTS: list[Chart] = [
    Chart("timeline-streams", "Client: streams in flight", "timeline_{run}", SECONDS, Axis("streams", zero=True),
          (Series("requests in flight (mean per bin)", lambda run: run.shared(_timeline).pipe(
              lambda t: _frame(t["t_s"], t["active_streams"]))),
           Series("Locust users (from its CSV history)", _locust_users),
           Series("in flight now (live, from streams as they arrive)", _live("in_flight"), style="dashed")),
          kind="step", marks=_cell_bands, live=True),
    Chart("timeline-decode", f"Client: {ALL_STREAMS} (decode tokens of every stream per second)", "timeline_{run}",
          SECONDS, Axis("tokens/s", zero=True),
          (Series(f"{ALL_STREAMS} (finished requests' records)", lambda run: run.shared(_timeline).pipe(
              lambda t: _frame(t["t_s"], t["decode_tps"]))),
           Series("output tokens/s (live: chunks as they arrive x tokens per chunk so far)", _live("tokens_per_s"),
                  style="dashed")),
          marks=_cell_bands, live=True),
    Chart("timeline-ttft", "Client: TTFT of each request at its send time, by cell", "timeline_{run}", SECONDS,
          Axis("TTFT", "s", zero=True),
          (Series("", lambda run: points.request_points(run.requests, "ttft_s", run.origin), per_request=True),
           Series("first tokens as they land (live)", _live_ttft, color=GREY)),
          kind="scatter", marks=_cell_bands, live=True),
    Chart("timeline-server", "Server, from its /metrics scrapes: requests running and queued (left), KV-cache use "
          "and accept length (right)", "timeline_{run}", SECONDS, Axis("requests", zero=True),
          (Series("running", _server_gauge("running"), kind="step"),
           Series("queued", _server_gauge("queued"), kind="step", style="dashed"),
           Series("KV-cache use (0-1)", _server_gauge("kv_use"), style="dotted", right=True),
           Series("accept length", _server_gauge("accept_length"), style="dashdot", right=True)),
          y2=Axis("KV use, accept length", zero=True), marks=_cell_bands),
    Chart("ttft-distribution", "TTFT by percentile, per cell (every successful request; linear interpolation)",
          "ttft_distribution", Axis("percentile"), Axis("TTFT", "s", log_beyond=20),
          (Series("", _distribution("ttft_s")),)),
    Chart("decode-distribution", "Decode t/s by percentile, per cell (every successful request; linear interpolation)",
          "decode_distribution", Axis("percentile"), Axis("decode", "t/s per stream"),
          (Series("", _distribution("decode_tps")),)),
    Chart("decode-per-scenario", "Single-stream decode per scenario (bar = mean over rounds, whisker = min-max; "
          "decode = (comp-1)/(total-ttft))", "decode_per_scenario", Axis("scenario"),
          Axis("decode tokens/s per stream", zero=True), (Series("mean over rounds", _decode_per_scenario),),
          kind="bar"),
    Chart("aggregate", "Aggregate tokens/s against concurrency, the protocol's: sum(comp-1) / max(total-ttft) "
          "(N = 1: single-stream code decode; whisker = min-max over rounds; free-running cells at their mean streams "
          "in flight)", "aggregate_vs_concurrency", STREAMS, Axis("aggregate tokens/s", zero=True),
          (Series("", _aggregate("aggregate_tps", "min", "max")),
           Series("linear scaling from 1 stream", _linear_scaling, style="dotted"),
           Series("free-running cells, steady state", _steady, style="dashdot"))),
    Chart("aggregate-window", "Aggregate tokens/s against concurrency, the wall-clock window's: sum(comp-1) / "
          "(last token - first token) (N = 1: single-stream code decode; whisker = min-max over rounds)",
          "aggregate_vs_concurrency", STREAMS, Axis("aggregate tokens/s", zero=True),
          (Series("", _aggregate("window_tps", "window_min", "window_max")),
           Series("linear scaling from 1 stream", _linear_scaling, style="dotted"))),
    Chart("prefill", "Prefill rate against prompt size (one point per request)", "prefill_vs_prompt_size",
          Axis("prompt tokens prefilled (usage.prompt_tokens minus cached tokens)", log=10),
          Axis("prefill tokens/s = prefilled tokens / TTFT", zero=True),
          (Series("cold (no prefix-cache hit)", lambda run: points.prefill_points(run.requests, hit=False),
                  per_request=True),
           Series("prefix-cache hit, uncached part", lambda run: points.prefill_points(run.requests, hit=True),
                  style="dashed", per_request=True)),
          kind="scatter"),
    _search_chart("ttft", "Capacity search: TTFT at the SLO's percentile per level (whisker: 5%-95% bootstrap "
                  "range; colour: the level's verdict)", Axis("TTFT", "s", zero=True)),
    _search_chart("decode", "Capacity search: decode t/s of the slow tail the SLO judges, per level",
                  PER_STREAM),
    _search_chart("goodput", "Capacity search: share of requests meeting the targets, per level",
                  Axis("share of requests", zero=True)),
    Chart("search-levels", "Capacity search: each level's SLO pass share in moving blocks (left) and delivered "
          "requests/s (right)", "search_{run}", LEVEL, Axis("pass share", zero=True),
          (Series("share of blocks meeting the SLO", _level_column("pass_share_blocks")),
           Series("delivered req/s", _level_column("delivered_rps"), style="dashed", right=True)),
          y2=Axis("delivered", "req/s", zero=True), applies=lambda run: bool(_search(run).get("levels"))),
    Chart("session-lanes", "Agent sessions: each turn from its send to its end, on its lane's rows (a main agent on its "
          "lane's first, its sub-agents on those above; the gaps are the agents' think time)", "sessions_{run}",
          SECONDS, Axis("lanes, a row per agent at work at once", zero=True), (Series("", lambda run: sessions.lane_spans(run.requests, run.origin),
                                           per_request=True),), kind="span", marks=_cell_bands),
    Chart("acceptance-by-position", "Speculative acceptance: expected tokens per verify step had the draft been cut "
          "to n, per cell (1 + p(1) + ... + p(n), p(k) the share of verify steps that accepted k drafts or more, from "
          "the server's counters per position or its requests' histograms; an estimate of acceptance, not of speed)",
          "acceptance_{run}", Axis("draft length n"), Axis("tokens per verify step", zero=True),
          (Series("", _acceptance_curves),)),
    Chart("energy-tokens-per-joule", "GPU energy: completion tokens per joule, per cell (every GPU read together; "
          "joules from the energy counter's change over the cell)", "energy_{run}", Axis("cell"),
          Axis("tokens per joule", zero=True), (Series("", _tokens_per_joule),), kind="bar"),
    _by_length_chart("ttft_s", "prompt_tokens", Axis("TTFT", "s", zero=True)),
    _by_length_chart("decode_tps", "completion_tokens", PER_STREAM),
    _sweep_chart("sweep-capacity", "Server sweep: capacity within the SLO (the search's best level)", "capacity",
                 Axis("capacity (users or req/s)", zero=True), applies=_sweep_has("capacity")),
    _sweep_chart("sweep-steady-decode", f"Server sweep: {ALL_STREAMS} (decode tokens of every stream per second, "
                 "steady state of the busiest free-running cell)", "steady_decode_tps", Axis(ALL_STREAMS, zero=True),
                 applies=_sweep_has("capacity", present=False)),
    _sweep_chart("sweep-decode-p50", "Server sweep: decode t/s per request, p50 (whisker: 95 % CI)", "decode_p50_tps",
                 PER_STREAM, ci="decode_p50"),
    _sweep_chart("sweep-ttft-p50", "Server sweep: TTFT p50 (whisker: 95 % CI)", "ttft_p50_s",
                 Axis("TTFT", "s", zero=True), ci="ttft_p50"),
    _sweep_chart("sweep-accept-length", "Server sweep: accept length (the server's tokens per target forward)",
                 "accept_length", Axis("tokens", zero=True), applies=_sweep_has("accept_length")),
    _sweep_chart("sweep-tok-per-chunk", "Server sweep: tok/chunk (client; no server accept length scraped)",
                 "tok_per_chunk", Axis("tokens", zero=True), applies=_sweep_has("accept_length", present=False)),
]
