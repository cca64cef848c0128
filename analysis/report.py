"""`report`: every figure of one run: the manifest, the end-of-run summary exactly as the live
run printed it, then the figures that go beyond it and Locust's own statistics."""

from __future__ import annotations

import pandas as pd

from analysis import locust_csv, text
from analysis.document import Document, Section
from analysis.rundir import Run
from analysis.run_summary import goodput_slo, summary_document
from analysis.sections import by_length, prefill
from analysis.summary import ProtocolTables, case_labels, scenario_label, summary_dict
from loadlib.figures import free_running, protocol_tables


def run_report(run: Run, slo_ttft_s: float | None = None, slo_decode_tps: float | None = None) -> Document:
    """The run's document. Goodput targets not given come from the run's profile (see `goodput_slo`)."""
    df = run.records
    tables = ProtocolTables.from_frame(df)
    summary = summary_document(df, run.manifest, run.path, goodput_slo(run.manifest, slo_ttft_s, slo_decode_tps),
                               tables)
    shown = {section.key for section in summary.sections}
    sections = [
        *summary.sections,
        single_details(tables.single),
        concurrency_details(tables.concurrent),
        by_length(free_running.by_length_table(df)),
        *([] if "prefill" in shown else [prefill(protocol_tables.prefill_table(df))]),
        *locust_csv.sections(run.locust),
    ]
    found = {"search": run.manifest["search"]} if run.manifest.get("search") else {}  # the search's own result
    return Document(summary.heading, sections, run.manifest, {**summary_dict(tables), **found})


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
        }), keys=("scenario",), left=("scenario",), optional=True)


def concurrency_details(conc: pd.DataFrame) -> Section:
    return Section(
        "concurrency", "Concurrency, both aggregate definitions: protocol = sum(comp-1)/max(total-ttft); "
        "window = sum(comp-1)/(last token - first token across the round's streams)",
        conc.drop(columns=["min", "max", "overlap_vs_stream_decode", "overlap_vs_single_decode"]), pd.DataFrame({
            "N": text.column(conc["concurrency"], 0),
            "case": case_labels(conc),
            "protocol t/s": text.column(conc["aggregate_tps"]),
            "window t/s": text.column(conc["window_tps"]),
            "window range": text.spans(conc["window_min"], conc["window_max"]),
            "per-stream decode t/s": text.column(conc["stream_decode_tps"]),
            "cached prompt": [text.percent(v) for v in conc["cached_share"]],
            "n": text.column(conc["n"], 0),
            "failed rounds": text.column(conc["failed_rounds"], 0),
        }), keys=("cell",), left=("case",), optional=True)
