"""The protocol's figures live in Locust's web UI: a tab, a chart page, the records, the report.

Locust's web UI is extended only the ways it supports: a tab (`extended_tabs`/`extended_tables`)
whose rows ride on the UI's own `/stats/requests` poll (`extended_stats`), links in its Download
Data tab (`extended_csv_files`), and Flask routes under `/uni/`. A Locust tab can only show a
table, so the charts live on a small self-contained page at `/uni/` (the charts declared live in
`loadlib.report.charts`, drawn by report.html's own script and its vendored uPlot, inlined: no CDN).

Every figure comes from the tables the post-processor renders (`loadlib.figures`: the protocol's
tables, TTFT percentiles, failures, prefill/cache, steady-state and timeline tables) applied to
the records that the run's session holds; on a master those are every worker's records. The
report is the end-of-run summary's own `loadlib.report.summary.render_summary`.
"""

from __future__ import annotations

import csv
import io
import logging
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol

import pandas as pd
from flask import Blueprint, Response, jsonify, request
from locust.env import Environment

from loadlib.figures import free_running, protocol_tables
from loadlib.figures.protocol_tables import ProtocolTables
from loadlib.modes import Phase
from loadlib.record_table import records_frame
from loadlib.records import JOURNAL_FIELDS, RECORDS_FILE, read_records
from loadlib.report import text
from loadlib.report import charts
from loadlib.report.html_page import inline_assets
from loadlib.report.html_page import REPORT_FILE
from loadlib.report.protocol import CASE_LABELS, SCENARIO_LABELS, cut_short, thinking_phrase
from loadlib.report.summary import render_summary
from loadlib.run import webform
from loadlib.run.webform import EditableRun
from loadlib.run_view import RunView
from loadlib.scenarios.base import SINGLE

log = logging.getLogger(__name__)

TAB_KEY = "uni-bench"
COLUMNS = [  # (row key, column title) of the tab's table and the page's
    ("cell", "Cell"), ("status", "Status"), ("ttft", "TTFT s, p50 / p90"), ("decode", "Decode t/s per stream"),
    ("tok_per_chunk", "Tok/chunk"), ("aggregate", "Aggregate t/s (overlap vs per-stream)"), ("cache", "Prefix cache"),
    ("done", "Done"), ("failures", "Failures"),
]
PAGE = "live.html"

if TYPE_CHECKING:
    from loadlib.modes import Driver, LoadMode
    from loadlib.profiles import Profile
    from loadlib.run.liveseries import LiveSeries


class LiveRun(Protocol):
    """What the tab and the page read of the run's session (`loadlib.run.session.RunSession`)."""

    run_dir: Path | None  # None before the first test
    manifest: Mapping[str, Any]
    driver: Driver | None
    profile: Profile | None
    live: LiveSeries  # the running figures of the streams in flight
    summarized: bool

    @property
    def mode(self) -> LoadMode: ...

    @property
    def record_count(self) -> int: ...

    @property
    def records(self) -> list[dict[str, Any]]: ...


class WebRun(LiveRun, EditableRun, Protocol):
    """What the web UI reads of the run's session: the live figures' and the forms'."""


def install(environment: Environment, session: WebRun) -> None:
    """Adds the tab, the page, the downloads and the checked start form (no-op without a web UI)."""
    web_ui = environment.web_ui
    if web_ui is None:
        return
    figures = LiveFigures(environment, session)
    base = getattr(environment.parsed_options, "web_base_path", None) or ""
    web_ui.template_args["extended_tabs"] = [{"title": "uni-bench", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": key, "title": title} for key, title in COLUMNS]}]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "./uni/", "title": "uni-bench live page: charts, figures and report"},
        {"href": "./uni/records.csv", "title": "uni-bench records so far (CSV, one row per request)"},
        {"href": "./uni/report", "title": "uni-bench report (text, as printed at the end of the run)"},
        {"href": "./uni/report.html", "title": "uni-bench report.html (tables and charts in one file, at the run's end)"},
    ]

    @web_ui.app.after_request
    def add_tab_rows(response: Response) -> Response:
        if request.path != f"{base}/stats/requests" or not response.is_json:
            return response
        try:
            rows = figures.tab_rows(f"{request.host_url.rstrip('/')}{base}/uni/")
        except Exception:  # Locust's whole UI polls this route: our tab must never break it
            log.exception("uni-bench tab: cannot compute the live figures")
            return response
        payload = response.get_json()
        payload["extended_stats"] = [{"key": TAB_KEY, "data": rows}]
        response.set_data(jsonify(payload).get_data())
        return response

    routes = Blueprint("uni", __name__, url_prefix=f"{base}/uni")
    guard = web_ui.auth_required_if_enabled
    routes.add_url_rule("/", "page", guard(_page))
    routes.add_url_rule("/figures.json", "figures", guard(lambda: jsonify(figures.page())))
    routes.add_url_rule("/records.csv", "records", guard(lambda: _csv_response(figures.records())))
    routes.add_url_rule("/report", "report", guard(lambda: Response(figures.report(), mimetype="text/plain")))
    routes.add_url_rule("/report.html", "report_page", guard(figures.report_page))
    web_ui.app.register_blueprint(routes)
    webform.install(environment, session)


# --- figures ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Slot:
    """One row of the tab: a single-stream scenario, a concurrency cell or a free-running cell."""

    cell: str
    case: str
    concurrency: int
    scenario: str | None  # single stream only
    rounds: int | None  # planned rounds; None for rows found only in the records
    target: str = ""  # an A/B run's server, by label

    @property
    def label(self) -> str:
        server = f"{self.target} · " if self.target else ""
        if self.case == SINGLE:
            return f"{server}1 stream · {SCENARIO_LABELS.get(self.scenario or '', self.scenario)}"
        if self.case in CASE_LABELS:
            return f"{server}{self.concurrency} streams · {CASE_LABELS[self.case]}"
        return f"{server}{self.cell}"


class LiveFigures:
    """The run's figures so far, for the tab and the page."""

    def __init__(self, environment: Environment, session: LiveRun) -> None:
        self.environment = environment
        self.session = session
        self._key: tuple[int, int, int] | None = None
        self._cached: tuple[pd.DataFrame, list[Slot], list[dict[str, str]]] | None = None

    def records(self) -> Iterable[dict[str, Any]]:
        """Every record of the run so far, from its journal."""
        run_dir = self.session.run_dir
        return read_records(run_dir) if run_dir is not None and (run_dir / RECORDS_FILE).exists() else []

    def report(self) -> str:
        """The end-of-run summary once saved, else the same summary of the records so far."""
        session = self.session
        if session.run_dir is None:
            return "No run yet: start one from the web UI's form.\n"
        saved = session.run_dir / "summary.txt"
        if saved.exists():
            return saved.read_text(encoding="utf-8")
        running = {key: value for key, value in session.manifest.items() if key != "ended_at"}  # not cut short: running
        return (f"Run in progress ({session.record_count} requests so far); run files: {session.run_dir}\n\n"
                + render_summary(self.records(), running, session.run_dir) + "\n")

    def report_page(self) -> Response:
        """The run's report.html once its end has written it; until then, why there is none."""
        page = self.session.run_dir / REPORT_FILE if self.session.run_dir is not None else None
        if page is None or not page.exists():
            return Response("report.html is written when the run ends.\n", status=404, mimetype="text/plain")
        return Response(page.read_bytes(), mimetype="text/html")

    def view(self) -> dict[str, Any]:
        """Phase, settings, table rows and the running figures of streams in flight (`live`, on the
        records' clock), as JSON-ready values."""
        session, state = self.session, self.environment.runner.state
        driver = session.driver
        phase = driver.phase if driver is not None else Phase()
        plan = list(driver.plan) if driver is not None else []
        frame, slots, figures = self._figures(driver, plan)
        current = _current_index(plan, phase)
        rows = [dict(cell=slot.label, status=_status(index, current, phase, state), **slot_figures)
                for index, (slot, slot_figures) in enumerate(zip(slots, figures))]
        live = session.live.series()
        origin = float(frame["sent_at"].min()) if len(frame) else (live["at"][0] if live["at"] else 0.0)
        search = f" · search: {phase.note}" if phase.note else ""  # the capacity search's bracket
        live_now = _live_text(session.live) if phase.state != "finished" else ""
        return {"phase": _phase_text(session, slots, len(plan), phase, current, state) + search + live_now,
                "state": state, "settings": _settings_text(self.environment, session, plan, frame),
                "target": _target_text(self.environment, session), "columns": COLUMNS, "rows": rows,
                "live": _live_series(live, origin), "run_dir": str(session.run_dir or ""),
                "requests": session.record_count,
                "report_page": session.run_dir is not None and (session.run_dir / REPORT_FILE).exists()}

    def page(self) -> dict[str, Any]:
        """The live page's data: `view`, and its charts (`loadlib.report.charts`' marked live) over
        the records so far and the streams in flight."""
        view = self.view()
        driver = self.session.driver
        frame = self._figures(driver, list(driver.plan) if driver is not None else [])[0]
        run = charts.ChartRun(RunView(frame, self.session.manifest or {}), live=view["live"])
        return {**view, "charts": charts.figures(charts.drawn_charts([run], live=True))}

    def tab_rows(self, page_url: str) -> list[dict[str, str]]:
        """The tab's table: what runs now, the run's settings, one row per cell, where the charts are."""
        view = self.view()
        blank = {key: "" for key, _title in COLUMNS[2:]}
        unbroken = [{key: value if key == "cell" else value.replace(" ", "\u00a0") for key, value in row.items()}
                    for row in view["rows"]]  # short figures stay on one line; the long first column wraps
        return [{"cell": view["phase"], "status": view["state"], **blank},
                {"cell": view["settings"], "status": "", **blank},
                *unbroken,
                {"cell": f"Charts, report, records CSV: {page_url}", "status": "", **blank},
                *([{"cell": f"The run's report.html (to open or share): {page_url}report.html", "status": "", **blank}]
                  if view["report_page"] else [])]

    def _figures(self, driver: Any, plan: list[Any]) -> tuple[pd.DataFrame, list[Slot], list[dict[str, str]]]:
        """The records' frame, the rows and their figures: recomputed only when records arrive."""
        key = (self.session.record_count, id(driver))
        if self._cached is None or key != self._key:
            frame = records_frame(self.session.records)
            slots = _slots(plan, frame)
            figures = {target: _slot_figures(frame[frame["target"] == target] if target else frame)
                       for target in {slot.target for slot in slots}}  # an A/B run: each target's own figures
            self._cached = (frame, slots, [figures[slot.target](slot) for slot in slots])
            self._key = key
        return self._cached


def _slots(plan: list[Any], frame: pd.DataFrame) -> list[Slot]:
    """The plan's rows in plan order, then any cell or scenario seen only in the records."""
    slots = [Slot(cell.name, cell.case, cell.concurrency,
                  cell.prompts[0] if cell.case == SINGLE else None, cell.rounds, cell.target) for cell in plan]
    known = {(slot.target, slot.cell, slot.scenario) for slot in slots}
    seen = frame.drop_duplicates(["target", "cell", "scenario"] if not frame.empty else [])
    for row in seen.itertuples():
        scenario = row.scenario if row.case == SINGLE else None
        if (row.target, row.cell, scenario) not in known:
            known.add((row.target, row.cell, scenario))
            slots.append(Slot(row.cell, row.case, int(row.concurrency), scenario, None, row.target))
    return slots


def _slot_figures(frame: pd.DataFrame) -> Callable[[Slot], dict[str, str]]:
    """A function from a row to its formatted figures, with the tables computed once.

    Single stream and the concurrency cells get the protocol's tables; a free-running cell (a
    load mode's) gets the post-processor's steady-state figures.
    """
    tables = ProtocolTables.from_frame(frame)
    single_frame = frame[frame["case"] == SINGLE]
    ttft_by_scenario = protocol_tables.ttft_percentiles(single_frame, by="scenario")
    concurrent = tables.concurrent.set_index("cell")
    steady = free_running.steady_state_table(frame).set_index("cell")
    steady_pct = free_running.steady_percentiles(frame)
    steady_ttft = steady_pct[steady_pct["figure"] == "ttft_s"].set_index("cell")
    steady_decode = steady_pct[steady_pct["figure"] == "decode_tps"].set_index("cell")
    steady_chunk = steady_pct[steady_pct["figure"] == "tok_per_chunk"].set_index("cell")
    prefill = protocol_tables.prefill_table(frame)

    def figures(slot: Slot) -> dict[str, str]:
        if slot.case == SINGLE:
            own = single_frame[single_frame["scenario"] == slot.scenario]
            single = _row(tables.single, slot.scenario)
            return _formatted(_row(ttft_by_scenario, slot.scenario), protocol_tables.failures_table(own),
                              _rounds_done(_get(single, "n"), own, slot.rounds),
                              decode=_get(single, "decode_tps"), tok_per_chunk=_get(single, "tok_per_chunk"),
                              cache=_cache_states(prefill[prefill["scenario"] == slot.scenario]))
        own = frame[frame["cell"] == slot.cell]
        failures = tables.failures[tables.failures["cell"] == slot.cell]
        if slot.case in protocol_tables.CONCURRENT_CASES:
            cell = _row(concurrent, slot.cell)
            return _formatted(_row(tables.ttft, slot.cell), failures, _rounds_done(_get(cell, "n"), own, slot.rounds),
                              decode=_get(cell, "stream_decode_tps"), aggregate=_get(cell, "aggregate_tps"),
                              overlap=_get(cell, "overlap_vs_stream_decode"), cache=_cached_share(_get(cell, "cached_share")))
        done = f"{len(own)} requests" if len(own) else text.MISSING
        return _formatted(_row(steady_ttft, slot.cell), failures, done,
                          decode=_get(_row(steady_decode, slot.cell), "p50"),
                          tok_per_chunk=_get(_row(steady_chunk, slot.cell), "p50"),
                          aggregate=_get(_row(steady, slot.cell), "decode_tps"),
                          cache=_cache_states(prefill[prefill["cell"] == slot.cell]))
    return figures


def _rounds_done(complete: Any, own: pd.DataFrame, planned: int | None) -> str:
    """Rounds that count (every stream succeeded) of those planned, as "2 of 3 rounds"."""
    if own.empty:
        return text.MISSING
    return f"{int(complete or 0)} of {planned or own['round'].nunique()} rounds"


def _cached_share(share: Any) -> str:
    """The concurrency table's measured radix state: "98% cached"."""
    return text.MISSING if text.num(share) == text.MISSING else f"{share:.0%} cached"


def _cache_states(prefill: pd.DataFrame) -> str:
    """Requests by observed cache state, from the prefill table: "hit 2 · cold 1"."""
    counts = prefill.groupby("cache", sort=False)["n"].sum()
    return " · ".join(f"{state} {int(n)}" for state, n in counts.items()) or text.MISSING


def _formatted(ttft: pd.Series | None, failures: pd.DataFrame, done: str, decode: Any = None,
               tok_per_chunk: Any = None, aggregate: Any = None, overlap: Any = None,
               cache: str = text.MISSING) -> dict[str, str]:
    return {
        "ttft": text.MISSING if ttft is None else f"{text.num(ttft['p50'], 3)} / {text.num(ttft['p90'], 3)}",
        "decode": text.num(decode),
        "tok_per_chunk": text.num(tok_per_chunk, 2),
        "aggregate": text.num(aggregate) + (f" ({text.ratio(overlap)})" if text.num(overlap) != text.MISSING else ""),
        "cache": cache,
        "done": done,
        "failures": "; ".join(f"{row.error} ×{int(row.count)}" for row in failures.itertuples())
                    or ("0" if done != text.MISSING else text.MISSING),
    }


def _row(table: pd.DataFrame, key: Any) -> pd.Series | None:
    return table.loc[key] if key in table.index else None


def _get(row: pd.Series | None, column: str) -> Any:
    return None if row is None else row[column]


def _live_series(live: dict[str, list[Any]], origin: float) -> dict[str, list[Any]]:
    """The running figures of streams in flight, seconds from the same origin as the records'."""
    return {"t_s": [round(at - origin, 3) for at in live["at"]], "tokens_per_s": live["tokens_per_s"],
            "in_flight": live["in_flight"], "ttft": [[round(at - origin, 3), v] for at, v in live["ttft"]]}


def _live_text(live: Any) -> str:
    """The streams in flight now, with output tokens/s and TTFT p50 over the last 10 s."""
    recent = live.recent(time.time())
    if not recent["in_flight"] and not recent["tokens_per_s"]:
        return ""
    ttft = text.num(recent["ttft_p50_s"], 3)
    streams = recent["in_flight"]
    noun = "stream" if streams == 1 else "streams"
    return (f" · live: {streams} {noun} in flight, {text.num(recent['tokens_per_s'])} tok/s, "
            f"TTFT p50 {ttft} s (last 10 s)")


def _rounded(values: pd.Series) -> list[float]:
    return [round(float(v), 3) for v in values.fillna(0.0)]


def _current_index(plan: list[Any], phase: Phase) -> int | None:
    """Which cell of the plan the driver is playing (single-stream cells differ by scenario)."""
    for index, cell in enumerate(plan):
        if cell.name == phase.cell and cell.target == phase.target and \
                (cell.case != SINGLE or cell.prompts[0] == phase.scenario):
            return index
    return None


def _status(index: int, current: int | None, phase: Phase, runner_state: str) -> str:
    running = runner_state in ("spawning", "running")
    if phase.state == "finished" or (current is not None and index < current):
        return "done"
    if phase.unplanned:  # a locustfile's own users: every row runs at once
        return "▶ running" if running else "stopped"
    if current is None or index > current:
        return "waiting" if running else ("not run" if current is not None else "")
    return f"▶ {_progress(phase, short=True)}" if running else f"stopped in {_progress(phase, short=True)}"


def _progress(phase: Phase, short: bool = False) -> str:
    """How far the current cell is: its round, or its time for a free-running cell."""
    if phase.round is not None:
        return f"round {phase.round + 1}{'/' if short else ' of '}{phase.rounds}"
    elapsed = f"{time.time() - (phase.started_at or time.time()):.0f} s"
    return f"{elapsed} of {phase.duration_s:.0f} s" if phase.duration_s else elapsed


def _phase_text(session: LiveRun, slots: list[Slot], plan_size: int, phase: Phase, current: int | None,
                runner_state: str) -> str:
    """What the run is doing now, in words; once it has ended, as its summary says."""
    if session.driver is None:
        return "No run yet: start one with the form (New test)"
    if session.summarized and session.manifest.get("ended_at"):
        cut = cut_short(session.manifest)
        if cut:
            return f"CUT SHORT ({cut}): {session.record_count} requests"
    if phase.state == "finished":
        return f"Finished: all {plan_size} cells done, {session.record_count} requests"
    if phase.unplanned:
        return (f"Now: the locustfile's own users, {session.record_count} requests so far" if runner_state in
                ("spawning", "running") else f"Stopped: {session.record_count} requests")
    if current is None:
        return "Starting: waiting for users" if runner_state in ("spawning", "running") else "Stopped"
    stopped = "" if runner_state in ("spawning", "running") else "stopped at "
    return f"Now: {stopped}cell {current + 1} of {plan_size}: {slots[current].label}, {_progress(phase)}"


def _settings_text(environment: Environment, session: LiveRun, plan: list[Any], frame: pd.DataFrame) -> str:
    """What is being measured: max tokens and thinking as the records show them (a profile may
    mix them), rounds as the plan has them, else the profile's (or the options') as they stand.

    The target is left out: Locust's header shows it, and the page shows it apart.
    """
    opts, profile = environment.parsed_options, session.profile
    max_tokens = sorted(frame["max_tokens"].dropna().astype(int).unique()) or \
        [profile.request.max_tokens if profile is not None else opts.max_tokens]
    planned_rounds = getattr(profile.load, "rounds", None) if profile is not None else None
    rounds = sorted({cell.rounds for cell in plan if cell.rounds}) or ([planned_rounds] if planned_rounds else [])
    thinking = profile.request.thinking if profile is not None else opts.thinking
    parts = [f"Model {(session.manifest or {}).get('model') or opts.model or '(first of /v1/models)'}",
             "max tokens " + "/".join(map(str, max_tokens)),
             "/".join(map(str, rounds)) + (" round" if rounds == [1] else " rounds") if rounds
             else f"{session.mode.name} load",
             "thinking " + thinking_phrase(frame["thinking"] if not frame.empty else [thinking])]
    if opts.profile:
        parts.append(f"profile {opts.profile}")
    return " · ".join(parts)


def _target_text(environment: Environment, session: LiveRun) -> str:
    targets = (session.manifest or {}).get("targets")
    if targets:  # an A/B run
        return " · ".join(f"{entry['label']} {entry['url']}" for entry in targets)
    target = (session.manifest or {}).get("target", {})
    simulator = " (built-in simulator)" if target.get("builtin_simulator") else ""
    return f"{target.get('url') or environment.host}{simulator}"


# --- routes ----------------------------------------------------------------------------------------

def _page() -> Response:
    """The live page, with uPlot and the charts' script inlined (as report.html has them: no CDN)."""
    html = resources.files("loadlib").joinpath("data", "webui", PAGE).read_text(encoding="utf-8")
    return Response(inline_assets(html), mimetype="text/html")


def _csv_response(records: Iterable[dict[str, Any]]) -> Response:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=JOURNAL_FIELDS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(records)
    return Response(out.getvalue(), mimetype="text/csv",
                    headers={"Content-Disposition": "attachment; filename=uni-bench-records.csv"})
