"""A server-configuration sweep's sections: one row per configuration (`loadlib.figures.sweep`) and
the last log lines of those that did not serve (the verdicts of each configuration against the
first that served follow, `loadlib.report.contents.sweep_of`); and a chart of the table. It formats;
the figures come computed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from loadlib.figures import sweep
from loadlib.figures.goodput import Slo
from loadlib.report import text
from loadlib.report.document import Section
from loadlib.report.sections import ALL_STREAMS
from loadlib.sweep.launch import OK

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LOG_LINES = 3  # of a configuration that did not serve, its log's last lines in the summary


def sweep_sections(table: pd.DataFrame, slo: Slo) -> tuple[list[Section], dict[str, Any]]:
    """The sweep's table and the logs of the configurations that did not serve, and `report
    --json`'s `"sweep"`. `table` is `sweep.sweep_table` of the configurations in the order run,
    their figures measured against `slo`."""
    return [sweep_section(table, slo), logs_section(table)], {"sweep": sweep.sweep_rows(table)}


def sweep_section(table: pd.DataFrame, slo: Slo) -> Section:
    """One row per configuration in the order run; columns no configuration has a figure in are left out."""
    view = pd.DataFrame({
        "configuration": table["label"].astype(str),
        "status": table["status"].astype(str),
        "n": text.column(table["n"], 0),
        "failed": text.column(table["failed"], 0),
        "capacity": [_capacity(value, variable, rps) for value, variable, rps
                     in zip(table["capacity"], table["capacity_variable"], table["capacity_rps"])],
        "decode p50 t/s": _with_ci(table, "decode_p50_tps", "decode_p50", 1),
        ALL_STREAMS: text.column(table["steady_decode_tps"], 1),
        "TTFT p50 s": _with_ci(table, "ttft_p50_s", "ttft_p50", 3),
        "TTFT p90 s": text.column(table["ttft_p90_s"], 3),
        "SLO met": [text.percent(v) for v in table["slo_met"]],
        "tok/chunk": text.column(table["tok_per_chunk"], 2),
        "accept len": text.column(table["accept_length"], 2),
        "expected tokens/step at draft 1..N": [text.MISSING if not isinstance(e, list) else
                                                " ".join(text.num(v, 2) for v in e) for e in table["expected_tokens"]],
        "tokens/J": text.column(table["tokens_per_joule"], 2),
        "J/token": text.column(table["joules_per_token"], 3),
        "warnings": ["; ".join(found) or text.MISSING for found in table["warnings"]],
    })
    view = view.drop(columns=[name for name in view.columns[4:] if (view[name] == text.MISSING).all()])
    left = tuple(name for name in ("configuration", "status", "expected tokens/step at draft 1..N", "warnings")
                 if name in view)
    return Section(
        "sweep", "Server sweep (one row per configuration, in the order run; capacity = the search's best level "
        "and the req/s it delivered; decode p50 = per request, (comp-1)/(total-ttft), with its 95 % CI; all-streams t/s = "
        "decode tokens of every stream per second, steady state of the busiest free-running cell; SLO met = steady-window requests meeting "
        f"TTFT <= {slo.ttft_s:g} s and decode >= {slo.decode_tps:g} t/s; tok/chunk = client, Σcomp/Σchunks; "
        "accept len = the server's tokens per target forward; expected tokens/step at draft 1..N = 1 + p(1) + ... + "
        "p(n) from its acceptance by draft position, an estimate of acceptance at a shorter draft, not of speed; "
        "tokens/J and J/token = completion tokens per joule of every GPU read over its cells; warnings = known performance warnings in its "
        "server's log)",
        table, view, keys=("label",), left=left)


def logs_section(table: pd.DataFrame) -> Section:
    """The configurations that did not serve, each with its status and its log's last lines."""
    failed = table[table["status"] != OK]
    data = failed[["label", "status", "log_tail"]].reset_index(drop=True)
    view = pd.DataFrame({"configuration": data["label"].astype(str), "status": data["status"].astype(str),
                         "last log lines": [" | ".join(tail[-LOG_LINES:]) or text.MISSING for tail in data["log_tail"]]})
    return Section("sweep_logs", "Configurations that did not serve (exited: before it was healthy; unhealthy: "
                   "not healthy in time, stopped; died: ended during its load; stopped: the test ended during it), "
                   "with the last lines of their logs",
                   data, view, keys=("label",), left=tuple(view.columns), optional=True)


def sweep_plot(table: pd.DataFrame) -> "Figure | None":
    """Four panels over the configurations (bars in the order run, whiskers = 95 % CI): capacity
    (or, without a search, steady decode of all streams), decode p50, TTFT p50, and accept length
    (the server's where scraped, else the client's tok/chunk). A configuration that did not serve
    shows its status instead of a bar. None for an empty table."""
    if table.empty:
        return None
    from matplotlib.figure import Figure  # only when drawing: the summary never needs it

    capacity = table["capacity"].notna().any()
    accept = "accept_length" if table["accept_length"].notna().any() else "tok_per_chunk"
    panels = [("capacity" if capacity else "steady_decode_tps", None,
               "capacity within SLO" if capacity else f"{ALL_STREAMS} (steady)"),
              ("decode_p50_tps", "decode_p50", "decode t/s per request (p50)"),
              ("ttft_p50_s", "ttft_p50", "TTFT p50 (s)"),
              (accept, None, "accept length" if accept == "accept_length" else "tok/chunk (client)")]
    panels = [panel for panel in panels if table[panel[0]].notna().any()]  # a rounds sweep has no steady decode
    if not panels:
        return None
    fig = Figure(figsize=(max(8.0, 1.2 * len(table) + 4), 7), layout="constrained")
    x = np.arange(len(table))
    labels = table["label"].astype(str).tolist()
    axes = fig.subplots(2, 2).flat
    for ax in list(axes)[len(panels):]:
        ax.set_visible(False)
    for ax, (column, ci, title) in zip(fig.axes, panels):
        values = table[column].to_numpy(dtype="float64")
        whiskers = None
        if ci is not None:
            low, high = (table[f"{ci}_ci_{end}"].to_numpy(dtype="float64") for end in ("low", "high"))
            whiskers = np.nan_to_num(np.vstack([values - low, high - values]), nan=0.0).clip(min=0)
        ax.bar(x, np.nan_to_num(values), yerr=whiskers, capsize=3, color="tab:blue")
        for i, status in enumerate(table["status"]):
            if status != OK:
                ax.text(i, 0, status, ha="center", va="bottom", rotation=90, color="tab:red")
        ax.set_title(title)
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    fig.suptitle("Server sweep: each configuration")
    return fig


def _capacity(value: float, variable: str | None, rps: float) -> str:
    if pd.isna(value):
        return text.MISSING
    unit = "users" if variable == "users" else "req/s"
    return f"{value:g} {unit}" + (f" ({rps:.2f} req/s)" if variable == "users" and not pd.isna(rps) else "")


def _with_ci(table: pd.DataFrame, column: str, ci: str, digits: int) -> list[str]:
    return [text.MISSING if pd.isna(v) else f"{text.num(v, digits)} ({text.num(lo, digits)}–{text.num(hi, digits)})"
            for v, lo, hi in zip(table[column], table[f"{ci}_ci_low"], table[f"{ci}_ci_high"])]
