"""The server's own view of a run, beside the client's: per-cell figures from `metrics.jsonl`.

The server's identity (version, launch flags, the client host) is in the manifest, which every
report shows first. These sections add what the server measured during each cell, with the
client's tok/chunk beside the server's accept length and a section of its own when the two
diverge. A run without `metrics.jsonl` (or a server without /metrics) adds no rows.
"""

from __future__ import annotations

from typing import Any, Mapping

import pandas as pd

from loadlib.figures.columns import distinct
from loadlib.report import text
from loadlib.report.document import Section
from loadlib.truth import server_figures

# what the client's side reads (the stream's chunk times tell the server's step, `server_figures.refresh_s`)
CLIENT_COLUMNS = ["cell", "sent_at", "first_token_at", "end_at", "scenario", "ok", "chunks", "completion_tokens"]


def server_sections(entries: list[dict[str, Any]], records: pd.DataFrame, manifest: Mapping[str, Any]) -> list[Section]:
    """Per cell: the server's figures, divergences from the client's tok/chunk, the router's split
    (the run's parsed scrapes, the records frame and manifest of the same run)."""
    records = records[CLIENT_COLUMNS]  # each cell's records are found in these alone, not in a copy of every column
    launch = (manifest.get("server") or {}).get("launch") or {}
    cells = server_cell_table(server_figures.server_cells(entries, records, launch), records)
    return [server_cells_section(cells), divergence_section(cells, launch.get("stream_interval")),
            router_split_section(server_figures.router_split(entries), records)]


def server_cell_table(cells: list[server_figures.ServerCell], records: pd.DataFrame) -> pd.DataFrame:
    """One row per source and cell, with the client's tok/chunk over the same cell beside.

    A cell with no measured records (warm-up, priming) is left out, as the client's figures
    leave it out; a run whose cells no scrape framed has one row, its `WHOLE_RUN`."""
    rows = []
    measured_cells = {*distinct(records["cell"]), server_figures.WHOLE_RUN}
    for c in cells:
        if c.span.cell not in measured_cells:
            continue
        own = server_figures.cell_records(records, c.span)
        tok_per_chunk = server_figures.client_tok_per_chunk(own)
        relative = server_figures.divergence(c.accept_length, tok_per_chunk)
        rows.append({
            "source": c.source, "server": c.server, "cell": c.span.cell,
            "scenario": server_figures.cell_scenario(c.span, own),
            "accept_length": c.accept_length, "accept_basis": c.accept_basis,
            "accept_per_draft": c.accept_per_draft,
            "client_tok_per_chunk": tok_per_chunk, "divergence": relative,
            "diverges": server_figures.diverges(relative, c.accept_tolerance),
            "divergence_cause": server_figures.divergence_cause(relative, c.accept_tolerance),
            "prefix_hit_rate": c.prefix_hit_rate, "prefix_basis": c.prefix_basis,
            "running_mean": c.running_mean, "running_max": c.running_max,
            "queued_mean": c.queued_mean, "queued_max": c.queued_max,
            "ttft_mean_s": c.ttft_mean_s, "requests": c.requests,
            "generated_tokens": c.generated_tokens, "samples": c.samples,
        })
    return pd.DataFrame(rows, columns=[
        "source", "server", "cell", "scenario", "accept_length", "accept_basis", "accept_per_draft",
        "client_tok_per_chunk", "divergence", "diverges", "divergence_cause", "prefix_hit_rate", "prefix_basis", "running_mean", "running_max",
        "queued_mean", "queued_max", "ttft_mean_s", "requests", "generated_tokens", "samples"])


def server_cells_section(table: pd.DataFrame) -> Section:
    view = pd.DataFrame({
        "source": table["source"].astype(str),
        "cell": text.cell_labels(table["cell"], table["scenario"]),
        "accept len": text.column(table["accept_length"], 2),
        "accept via": _basis(table["accept_basis"]),
        "per draft": text.column(table["accept_per_draft"], 2),
        "client tok/chunk": text.column(table["client_tok_per_chunk"], 2),
        "diff": [_diff(v, cause) for v, cause in zip(table["divergence"], table["divergence_cause"])],
        "prefix hit": [text.percent(v, 1) for v in table["prefix_hit_rate"]],
        "hit via": _basis(table["prefix_basis"]),
        "running": [_mean_max(m, x) for m, x in zip(table["running_mean"], table["running_max"])],
        "queued": [_mean_max(m, x) for m, x in zip(table["queued_mean"], table["queued_max"])],
        "server TTFT s": text.column(table["ttft_mean_s"], 3),
        "requests": text.column(table["requests"], 0),
    })
    if table["accept_per_draft"].isna().all():  # a server without drafting counters (SGLang's gauge)
        view = view.drop(columns="per draft")
    return Section(
        "server_cells", "Server view per cell (from its /metrics; accept length = tokens per target forward "
        "pass, by counter deltas (generated / (generated - accepted)) or the mean of the server's gauge during "
        "the cell; per draft = the server's own 1 + accepted / drafts, over the steps that had a draft; "
        "client tok/chunk = Σcomp/Σchunks, stream-chunk basis; diff ! = chunks merged on the way, "
        "diff ~ = fewer tokens a chunk than a forward accepts (one a chunk: tok/chunk cannot estimate the "
        "accept length); running/queued = mean/max of scrapes during the cell)",
        table, view, keys=("source", "cell", "scenario"), left=("source", "cell"), optional=True)


def divergence_section(table: pd.DataFrame, stream_interval: int | None = None) -> Section:
    flagged = table[table["diverges"].astype(bool)]
    limit = (f"{text.percent(server_figures.DIVERGENCE_LIMIT)} (by counters; "
             f"{text.percent(server_figures.GAUGE_LIMIT)} by a gauge, which samples a few intervals)")
    reported = f"; the server reports stream_interval {stream_interval}" if (stream_interval or 1) > 1 else ""
    return Section(
        "server_divergence", f"DIVERGENCE: the client's tok/chunk is more than {limit} above the "
        f"server's accept length: {server_figures.MERGED}{reported}",
        flagged[["source", "cell", "scenario", "accept_length", "accept_basis", "client_tok_per_chunk",
                 "divergence"]],
        pd.DataFrame({
            "source": flagged["source"].astype(str),
            "cell": text.cell_labels(flagged["cell"], flagged["scenario"]),
            "accept len": text.column(flagged["accept_length"], 2),
            "client tok/chunk": text.column(flagged["client_tok_per_chunk"], 2),
            "diff": [text.signed_percent(v * 100) for v in flagged["divergence"]],
        }), keys=("source", "cell", "scenario"), left=("source", "cell"), optional=True)


def router_split_section(splits: list[server_figures.RouterSplit], records: pd.DataFrame) -> Section:
    data = pd.DataFrame([
        {"source": split.source, "cell": split.span.cell,
         "scenario": server_figures.cell_scenario(split.span, server_figures.cell_records(records, split.span)),
         "worker": worker, "requests": n}
        for split in splits for worker, n in split.requests.items()],
        columns=["source", "cell", "scenario", "worker", "requests"])
    return Section(
        "router_split", "Router: requests sent to each worker per cell (counted by sglang-router)",
        data, pd.DataFrame({
            "cell": text.cell_labels(data["cell"], data["scenario"]),
            "worker": data["worker"].astype(str),
            "requests": text.column(data["requests"], 0),
        }), keys=("source", "cell", "scenario", "worker"), left=("cell", "worker"), optional=True)


def _basis(values: pd.Series) -> list[str]:
    return [v if isinstance(v, str) else text.MISSING for v in values]


def _diff(relative: float | None, cause: str | None) -> str:
    shown = text.MISSING if relative is None or pd.isna(relative) else text.signed_percent(relative * 100)
    mark = {server_figures.MERGED: " !", server_figures.SPLIT: " ~"}.get(cause, "")
    return shown + mark


def _mean_max(mean: float | None, peak: float | None) -> str:
    return text.MISSING if mean is None or pd.isna(mean) else f"{text.num(mean)}/{text.num(peak, 0)}"
