"""The protocol's tables in the thread's layout, as a dict (JSON schema of issue 8) and as
sections, and the settings line that heads every summary.

The end-of-run summary (`loadlib.report.summary`) and `python -m analysis report` both build on
these, from the same raw records.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import pandas as pd

from loadlib.figures import protocol_tables
from loadlib.figures.columns import distinct, isin
from loadlib.figures.protocol_tables import PERCENTILES, ProtocolTables
from loadlib.figures.uncertainty import uncertainty_columns
from loadlib.figures.validity import aggregate_misleading
from loadlib.record_table import THINKING_MODES, records_frame
from loadlib.report import sections, text
from loadlib.report.document import Section, rows
from loadlib.scenarios.base import SINGLE

MAX_TOKENS_LISTED = 6  # more distinct max_tokens than this are shown as a range
CASE_LABELS = {"same": "same prompt (radix hit)", "different": "different prompts"}
SCENARIO_LABELS = {"code": "code generation", "en_tech": "English technical",
                   "cn_chat": "Chinese chat", "cn_essay": "Chinese essay"}
PROTOCOL_CASES = (SINGLE, *protocol_tables.CONCURRENT_CASES)
# issue 8's JSON schema (plus the cell, which tells apart two cells of one N and case)
SINGLE_FIELDS = ["decode_tps", "decode_min", "decode_max", "ttft_s", "tok_per_chunk", "n"]
CONCURRENT_FIELDS = ["cell", "concurrency", "case", "aggregate_tps", "min", "max", "n", "failed_rounds",
                     "overlap_vs_stream_decode", "overlap_vs_single_decode"]
THINKING_PHRASES = {"on": "ON", "off": "off", "server": "server default (not sent)"}


def protocol_summary(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Issue 8's JSON schema, plus `ttft_percentiles` (by cell) and `failures` (by cell and reason).

    Missing figures (no successful rounds) are None.
    """
    return summary_dict(ProtocolTables.from_frame(records_frame(records)))


def summary_dict(tables: ProtocolTables) -> dict[str, Any]:
    single = tables.single[SINGLE_FIELDS]
    concurrent = tables.concurrent[CONCURRENT_FIELDS]
    return {
        "single": dict(zip(single.index, rows(single))),
        "concurrent": rows(concurrent),
        "ttft_percentiles": dict(zip(tables.ttft.index, rows(tables.ttft))),
        "failures": rows(tables.failures),
    }


def protocol_sections(tables: ProtocolTables) -> list[Section]:
    """The thread's tables: single stream, concurrency and TTFT percentiles (with thinking, TTFO
    percentiles after them)."""
    single, concurrent, ttft = tables.single, tables.concurrent, tables.ttft
    return [
        Section(
            "single", "Single stream (decode = (comp-1)/(total-ttft); tok/chunk on the stream-chunk basis)",
            single[SINGLE_FIELDS + _ttfo(single, ["ttfo_s"])].reset_index(), pd.DataFrame({
                "scenario": [scenario_label(name) for name in single.index],
                "decode t/s": text.column(single["decode_tps"]),
                "range": text.spans(single["decode_min"], single["decode_max"]),
                "TTFT s": text.column(single["ttft_s"], 3),
                **{"TTFO s": text.column(single[col], 3) for col in _ttfo(single, ["ttfo_s"])},
                "tok/chunk": text.column(single["tok_per_chunk"], 2),
                "n": text.column(single["n"], 0),
            }), keys=("scenario",), left=("scenario",)),
        concurrency_section(tables),
        aggregate_caveat_section(concurrent),
        ttft_section(ttft),
        *([ttfo_section(ttft)] if _ttfo(ttft, TTFO_PERCENTILES) else []),
    ]


def concurrency_section(tables: ProtocolTables) -> Section:
    """The thread's concurrency table; where the protocol's aggregate misleads in some cell
    (`protocol_tables.concurrency_table`'s `misleads`), the wall-clock aggregate beside it, marked
    ! on the cells it misleads in (`aggregate_caveat_section` says why)."""
    concurrent = tables.concurrent
    view = pd.DataFrame({
        "N": text.column(concurrent["concurrency"], 0),
        "case": case_labels(concurrent, tables.kinds),
        "aggregate t/s": text.column(concurrent["aggregate_tps"]),
        "range": text.spans(concurrent["min"], concurrent["max"]),
        **({WALL_CLOCK: [f"{value} !" if misleads else value for value, misleads in
                         zip(text.column(concurrent["window_tps"]), concurrent["misleads"])]}
           if concurrent["misleads"].any() else {}),
        "n": text.column(concurrent["n"], 0),
        "dropped": text.column(concurrent["failed_rounds"], 0),
        "overlap vs per-stream": [text.ratio(v) for v in concurrent["overlap_vs_stream_decode"]],
        "vs single code": [text.ratio(v) for v in concurrent["overlap_vs_single_decode"]],
    })
    return Section(
        "concurrent", "Concurrency (aggregate = sum(comp-1)/max(total-ttft) per round, mean over rounds: "
        f"{protocol_tables.ROUND_RULE}, dropped = rounds left out; overlap = aggregate / mean per-stream decode "
        "of those rounds (the thread's), and aggregate / single-stream code decode"
        + (f"; {WALL_CLOCK} = sum(comp-1)/(last token - first token of the round), ! where the aggregate misleads"
           if concurrent["misleads"].any() else "") + ")",
        concurrent[CONCURRENT_FIELDS], view, keys=("cell",), left=("case",))


WALL_CLOCK = "wall-clock t/s"


def aggregate_caveat_section(concurrent: pd.DataFrame) -> Section:
    """One line a cell in which the protocol's aggregate misleads, saying why it and the
    wall-clock aggregate differ (none where it misleads nowhere)."""
    misled = concurrent[concurrent["misleads"]]
    return Section(
        "aggregate_caveat", "THE PROTOCOL'S AGGREGATE MISLEADS here: read the wall-clock t/s beside it (not a fault "
        "of the server or the client; the protocol's figure is kept as the thread defines it)",
        misled[["cell", "concurrency", "aggregate_tps", "window_tps", "together"]],
        pd.DataFrame({"why the two aggregates differ": [f"{row['cell']}: {aggregate_misleading(row)}"
                                                       for _, row in misled.iterrows()]}),
        keys=("cell",), left=("why the two aggregates differ",), optional=True)


def ttft_section(ttft: pd.DataFrame) -> Section:
    """The thread's TTFT percentiles per cell, each with its 95 % confidence interval, and marked
    where it rests on too few samples to be a tail estimate (`sections.percentile_note`)."""
    columns = ["p50", "p90", "p99", "n", *uncertainty_columns(PERCENTILES)]
    return Section(
        "ttft_percentiles", "TTFT percentiles (s, from raw records of successful requests"
        + sections.percentile_note(ttft) + ")",
        ttft[columns].reset_index(), pd.DataFrame({
            "cell": list(ttft.index.astype(str)),
            **{col: sections.marked(ttft, col, 3) for col in sections.PERCENTILE_NAMES},
            "n": text.column(ttft["n"], 0),
            **{f"{col} CI": sections.interval(ttft, col, 3) for col in sections.PERCENTILE_NAMES},
        }), keys=("cell",), left=("cell",))


def ttfo_section(ttft: pd.DataFrame) -> Section:
    """With thinking, the same for TTFO per cell (its own table: beside TTFT's, with both sets of
    intervals, a line would pass 160 characters)."""
    names = [f"ttfo_{col}" for col in sections.PERCENTILE_NAMES]
    columns = [*names, "ttfo_n", *uncertainty_columns(PERCENTILES, prefix="ttfo_")]
    return Section(
        "ttfo_percentiles", "TTFO percentiles (s; TTFO = time to the first answer token after the reasoning"
        + sections.percentile_note(ttft, names) + ")",
        ttft[columns].reset_index(), pd.DataFrame({
            "cell": list(ttft.index.astype(str)),
            **{f"TTFO {col[5:]}": sections.marked(ttft, col, 3) for col in names},
            "n": text.column(ttft["ttfo_n"], 0),
            **{f"{col[5:]} CI": sections.interval(ttft, col, 3) for col in names},
        }), keys=("cell",), left=("cell",))


TTFO_PERCENTILES = ["ttfo_p50", "ttfo_p90", "ttfo_p99"]


def _ttfo(table: pd.DataFrame, columns: list[str]) -> list[str]:
    """The TTFO columns of a table where any row has a TTFO (a run with thinking), else none."""
    return columns if columns[0] in table and table[columns[0]].notna().any() else []


def failures_section(failures: pd.DataFrame) -> Section:
    return Section("failures", "Failures by reason (excluded from every figure above)", failures,
                   failures.astype(str), keys=("cell", "error"), left=("cell", "error"))


def case_labels(concurrent: pd.DataFrame, kinds: Mapping[str, str]) -> list[str]:
    """The case as the thread names it, and the cell's name where the cell is not of the
    protocol's own kinds (`kinds`, `protocol_tables.cell_kinds`: `c8-distinct-issues` beside the
    protocol's `c8-different`)."""
    return [CASE_LABELS.get(case, case) + ("" if kinds.get(cell, case) == case else f", {cell}")
            for cell, case in zip(concurrent["cell"], concurrent["case"])]


def settings_line(df: pd.DataFrame, manifest: Mapping[str, Any] | None) -> str:
    """What was measured: the load mode of free-running cells, model and target from the
    manifest, then the settings, the protocol's rounds (when it ran) and the request counts
    from the records."""
    manifest = manifest or {}
    cases = distinct(df["case"])
    modes = sorted(str(case) for case in cases if case not in PROTOCOL_CASES)
    parts = [f"{'/'.join(modes)} run"] if modes else []
    target = manifest.get("target")
    if manifest.get("targets"):  # an A/B run
        target = ", ".join(f"{entry.get('label')} {_target_phrase(entry)}" for entry in manifest["targets"])
    elif isinstance(target, Mapping):
        target = _target_phrase(target)
    parts += [f"{key} {value}" for key, value in (("model", manifest.get("model")),
                                                  ("targets" if manifest.get("targets") else "target", target)) if value]
    max_tokens = max_tokens_phrase(df["max_tokens"])
    if max_tokens:
        parts.append(f"max_tokens {max_tokens}")
    parts.append("thinking " + thinking_phrase(df["thinking"].unique()))
    if any(case in PROTOCOL_CASES for case in cases):
        rounds = int(df.loc[isin(df["case"], PROTOCOL_CASES), "round"].max()) + 1
        parts.append(f"{rounds} round{'s' if rounds > 1 else ''}")
    parts.append(f"{len(df)} requests, {int((~df['ok']).sum())} failed")
    cut = cut_short(manifest)
    if cut:
        parts.append(f"CUT SHORT ({cut}): the figures cover only the requests that finished")
    return "uni-bench summary: " + ", ".join(parts)


def max_tokens_phrase(max_tokens: pd.Series) -> str | None:
    """The run's max_tokens, "512" or "512/1024", or their range and count ("16–2048 (71 values)")
    where there are more than `MAX_TOKENS_LISTED` (lengths drawn per request: synthetic, dataset,
    trace); None for none. One phrase for the settings line and compare's settings table, so that
    the two say the same."""
    values = sorted({int(value) for value in distinct(max_tokens)})
    if len(values) > MAX_TOKENS_LISTED:
        return f"{values[0]}–{values[-1]} ({len(values)} values)"
    return "/".join(map(str, values)) or None


def _target_phrase(target: Mapping[str, Any]) -> str:
    return f"{target.get('url')}{' (built-in simulator)' if target.get('builtin_simulator') else ''}"


def thinking_phrase(modes: Iterable[str]) -> str:
    """How the requests asked for thinking, in the order on, off, server ("ON", "on and off",
    "server default (not sent)"): a run with thinking on must say so, and one that left
    it to the server's template must say that, since the figures differ a lot."""
    found = set(modes)
    known = [mode for mode in THINKING_MODES[1:] + THINKING_MODES[:1] if mode in found]
    if len(known) == 1:
        return THINKING_PHRASES[known[0]]
    return " and ".join(mode if mode != "server" else "server default" for mode in known) or "off"


def cut_short(manifest: Mapping[str, Any]) -> str | None:
    """Why the run ended early, from the end marker the client writes into its manifest.

    The manifest is written at the start with `ended_at: null` and rewritten at the end with the
    time and `finished` (the whole plan ran). A null `ended_at` means the client never reached
    its end (killed); `finished: false` means it was stopped (Ctrl-C, --run-time, web UI stop).
    Manifests without the marker (other tools, older runs) say nothing.
    """
    if "ended_at" in manifest and manifest["ended_at"] is None:
        return "the client never reached the end of the run"
    if manifest.get("stopped_early"):
        return f"stopped early: {manifest['stopped_early']}"
    if manifest.get("finished") is False:
        return f"stopped before the plan was done: {manifest['cut_short']}" if manifest.get("cut_short") \
            else "stopped before the plan was done"
    return None


def scenario_label(name: str) -> str:
    return f"{name} ({SCENARIO_LABELS[name]})" if name in SCENARIO_LABELS else name


def single_details(tables: ProtocolTables) -> Section:
    single = tables.single
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


def concurrency_details(tables: ProtocolTables) -> Section:
    conc = tables.concurrent
    return Section(
        "concurrency", "Concurrency, both aggregate definitions: protocol = sum(comp-1)/max(total-ttft); "
        "window = sum(comp-1)/(last token - first token across the round's streams); streams at once = the fewest "
        "that decoded at once in a round",
        conc.drop(columns=["min", "max", "overlap_vs_stream_decode", "overlap_vs_single_decode"]), pd.DataFrame({
            "N": text.column(conc["concurrency"], 0),
            "case": case_labels(conc, tables.kinds),
            "protocol t/s": text.column(conc["aggregate_tps"]),
            "window t/s": text.column(conc["window_tps"]),
            "window range": text.spans(conc["window_min"], conc["window_max"]),
            "per-stream decode t/s": text.column(conc["stream_decode_tps"]),
            "streams at once": text.column(conc["together"], 0),
            "cached prompt": [text.percent(v) for v in conc["cached_share"]],
            "n": text.column(conc["n"], 0),
            "failed rounds": text.column(conc["failed_rounds"], 0),
        }), keys=("cell",), left=("case",), optional=True)
