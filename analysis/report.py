"""`report`: every figure of one run, the protocol's tables first and then what goes beyond them."""

from __future__ import annotations

import pandas as pd

from analysis import locust_csv, server_view, text
from analysis.document import Document, Section
from analysis.rundir import Run
from analysis.summary import (CASE_LABELS, ProtocolTables, protocol_sections, scenario_label,
                              settings_line, summary_dict)
from loadlib import metrics


def run_report(run: Run, slo_ttft_s: float = 2.0, slo_decode_tps: float = 20.0) -> Document:
    """The run's document: the live summary's tables, then the extended figures, then Locust's."""
    df = run.records
    tables = ProtocolTables.from_frame(df)
    sections = [
        *protocol_sections(tables),
        *server_view.server_sections(run),
        single_details(tables.single),
        concurrency_details(tables.concurrent),
        prefill(metrics.prefill_table(df)),
        steady_state(metrics.steady_state_table(df, slo_ttft_s, slo_decode_tps), slo_ttft_s, slo_decode_tps),
        steady_percentiles(metrics.steady_percentiles(df)),
        *locust_csv.sections(run.locust),
    ]
    return Document(settings_line(df, run.manifest), sections, run.manifest, summary_dict(tables))


def single_details(single: pd.DataFrame) -> Section:
    return Section(
        "single_stream", "Single stream, more figures (end-to-end = comp/total, prefill included; "
        "forward rate = decode / tok-per-chunk, estimated verify steps/s)",
        single[["e2e_tps", "forward_rate", "n", "failed"]].reset_index(), pd.DataFrame({
            "scenario": [scenario_label(name) for name in single.index],
            "end-to-end t/s": text.column(single["e2e_tps"]),
            "forward rate /s": text.column(single["forward_rate"]),
            "n": text.column(single["n"], 0),
            "failed": text.column(single["failed"], 0),
        }), keys=("scenario",), left=("scenario",))


def concurrency_details(conc: pd.DataFrame) -> Section:
    return Section(
        "concurrency", "Concurrency, both aggregate definitions: protocol = sum(comp-1)/max(total-ttft); "
        "window = sum(comp-1)/(last token - first token across the round's streams)",
        conc.drop(columns=["min", "max", "overlap"]), pd.DataFrame({
            "N": text.column(conc["concurrency"], 0),
            "case": [CASE_LABELS.get(case, case) for case in conc["case"]],
            "protocol t/s": text.column(conc["aggregate_tps"]),
            "window t/s": text.column(conc["window_tps"]),
            "window range": text.spans(conc["window_min"], conc["window_max"]),
            "per-stream decode t/s": text.column(conc["stream_decode_tps"]),
            "cached prompt": [text.percent(v) for v in conc["cached_share"]],
            "n": text.column(conc["n"], 0),
            "failed rounds": text.column(conc["failed_rounds"], 0),
        }), keys=("concurrency", "case"), left=("case",))


def prefill(table: pd.DataFrame) -> Section:
    return Section(
        "prefill", "Prefill (prefill = prompt/TTFT, the protocol's cold figure on cold rows; "
        "uncached = (prompt - cached)/TTFT)",
        table, pd.DataFrame({
            "cell": table["cell"].astype(str), "scenario": table["scenario"].astype(str),
            "cache": table["cache"].astype(str),
            "prompt tokens": text.column(table["prompt_tokens"], 0),
            "cached tokens": text.column(table["cached_tokens"], 0),
            "TTFT s": text.column(table["ttft_s"], 3),
            "prefill t/s": text.column(table["prefill_tps"], 0),
            "uncached t/s": text.column(table["uncached_prefill_tps"], 0),
            "n": text.column(table["n"], 0),
        }), keys=("cell", "scenario", "cache"), left=("cell", "scenario", "cache"), optional=True)


def steady_state(table: pd.DataFrame, slo_ttft_s: float, slo_decode_tps: float) -> Section:
    return Section(
        "steady_state", f"Steady state of free-running cells (window: in-flight requests at or above "
        f"their median; goodput = completions/s meeting TTFT <= {slo_ttft_s:g} s and decode >= "
        f"{slo_decode_tps:g} t/s)",
        table, pd.DataFrame({
            "cell": table["cell"].astype(str),
            "window s": [f"{text.num(s)}+{text.num(w)}" for s, w in zip(table["window_start_s"], table["window_s"])],
            "in flight": text.column(table["in_flight"]),
            "decode t/s": text.column(table["decode_tps"]),
            "req/s": text.column(table["requests_per_s"], 2),
            "goodput req/s": text.column(table["goodput_rps"], 2),
            "SLO met": [text.percent(v) for v in table["slo_attainment"]],
            "n": text.column(table["n"], 0),
            "failed": text.column(table["failed"], 0),
        }), keys=("cell",), left=("cell",), optional=True)


def steady_percentiles(table: pd.DataFrame) -> Section:
    digits = {"ttft_s": 3, "tok_per_chunk": 2}
    return Section(
        "steady_percentiles", "Steady-state percentiles (raw records sent within the window)",
        table, pd.DataFrame({
            "cell": table["cell"].astype(str), "figure": table["figure"].astype(str),
            **{col: [text.num(v, digits.get(f, 1)) for v, f in zip(table[col], table["figure"])]
               for col in ("p50", "p90", "p99")},
            "n": text.column(table["n"], 0),
        }), keys=("cell", "figure"), left=("cell", "figure"), optional=True)
