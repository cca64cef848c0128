"""A server-configuration sweep's sections: one row per configuration (`loadlib.figures.sweep`) and
the last log lines of those that did not serve (the verdicts of each configuration against the
first that served follow, `loadlib.report.contents.sweep_of`); its charts are declared in
`loadlib.report.charts`. It formats; the figures come computed.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from loadlib.figures import sweep
from loadlib.modes import search
from loadlib.figures.goodput import Slo
from loadlib.report import text
from loadlib.report.document import Section
from loadlib.report.sections import ALL_STREAMS
from loadlib.sweep.launch import OK

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


def _capacity(value: float, variable: str | None, rps: float) -> str:
    if pd.isna(value):
        return text.MISSING
    closed = variable is not None and variable != "rate"  # users or sessions: the req/s they delivered beside
    return search.level_text(variable or "rate", value) + (f" ({rps:.2f} req/s)" if closed and not pd.isna(rps) else "")


def _with_ci(table: pd.DataFrame, column: str, ci: str, digits: int) -> list[str]:
    return [text.MISSING if pd.isna(v) else f"{text.num(v, digits)} ({text.num(lo, digits)}–{text.num(hi, digits)})"
            for v, lo, hi in zip(table[column], table[f"{ci}_ci_low"], table[f"{ci}_ci_high"])]
