"""`panorama`: configurations against (same prompt, different prompts) at every concurrency, and
scaling ratios between runs.

Same prompt is the ideal upper bound (shared prefill through the radix cache, identical drafts);
different prompts is the figure closest to production. Scaling compares each run with the first:
single-stream decode (a router in front should cost nothing, 1.00x) and each run's highest
concurrency against the first run's (two instances at 8 streams against one at 4: near-linear,
2.00x, is the goal).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import locust_csv, text
from analysis.document import Document, Section
from analysis.rundir import Run
from analysis.summary import CASE_LABELS, case_labels
from loadlib.figures import protocol_tables
from loadlib.figures.protocol_tables import ProtocolTables

REFERENCE_SCENARIO = "code"


def panorama(runs: list[Run]) -> Document:
    """The grid of configurations, the scaling ratios, and Locust's totals of each run."""
    tables = {run.label: ProtocolTables.from_frame(run.records) for run in runs}
    return Document(f"Panorama of {len(runs)} runs: {', '.join(tables)}",
                    [grid(tables), scaling(tables), locust_csv.side_by_side(runs)])


def grid(tables: dict[str, ProtocolTables]) -> Section:
    """One row a run; single-stream code decode, then aggregate t/s per N and case."""
    long = pd.concat([t.concurrent.assign(run=label) for label, t in tables.items()], ignore_index=True)
    kinds = {cell: kind for t in tables.values() for cell, kind in t.kinds.items()}
    long["column"] = [f"{n} × {label}" for n, label in zip(long["concurrency"], case_labels(long, kinds))]
    single = pd.DataFrame({"run": list(tables), "cell": protocol_tables.SINGLE_CASE, "concurrency": 1,
                           "case": protocol_tables.SINGLE_CASE, "aggregate_tps": [_single_decode(t) for t in tables.values()],
                           "column": f"1 stream {REFERENCE_SCENARIO}"})
    data = pd.concat([single, long[["run", "cell", "concurrency", "case", "aggregate_tps", "min", "max", "n",
                                    "column"]]], ignore_index=True)
    order = data.assign(_case=data["case"].map({"single": 0, **{c: i + 1 for i, c in enumerate(protocol_tables.CONCURRENT_CASES)}}))
    columns = list(dict.fromkeys(order.sort_values(["concurrency", "_case", "cell"])["column"]))
    view = text.grid(data.assign(cell=text.column(data["aggregate_tps"])), "run", "column", list(tables), columns)
    return Section("panorama", "Panorama: aggregate t/s (protocol definition) per configuration; "
                   "same prompt = ideal bound, different prompts = closest to production",
                   data.drop(columns="column"), view, keys=("run", "cell"), left=("run",))


def scaling(tables: dict[str, ProtocolTables]) -> Section:
    """Ratios of every run to the first, with the linear expectation beside them."""
    labels = list(tables)
    first = tables[labels[0]]
    rows = []
    for label in labels[1:]:
        other = tables[label]
        rows.append({"comparison": f"{label} vs {labels[0]}: 1 stream {REFERENCE_SCENARIO} decode",
                     "ratio": _single_decode(other) / _single_decode(first), "linear": 1.0})
        for case in protocol_tables.CONCURRENT_CASES:
            top, top_first = _top(other.concurrent, case), _top(first.concurrent, case)
            if top is None or top_first is None:
                continue
            rows.append({"comparison": f"{label} c{top[0]} vs {labels[0]} c{top_first[0]}: {CASE_LABELS[case]}",
                         "ratio": top[1] / top_first[1], "linear": top[0] / top_first[0]})
    data = pd.DataFrame(rows, columns=["comparison", "ratio", "linear"])
    data["efficiency"] = data["ratio"] / data["linear"]
    view = pd.DataFrame({"comparison": data["comparison"], "ratio": [text.ratio(v) for v in data["ratio"]],
                         "linear would be": [text.ratio(v) for v in data["linear"]],
                         "of linear": [text.percent(v) for v in data["efficiency"]]})
    return Section("scaling", "Scaling against the first run (each run's highest concurrency against the "
                   "first run's; aggregate t/s, protocol definition)", data, view,
                   keys=("comparison",), left=("comparison",), optional=True)


def _single_decode(tables: ProtocolTables) -> float:
    return float(tables.single["decode_tps"].get(REFERENCE_SCENARIO, np.nan))


def _top(concurrent: pd.DataFrame, case: str) -> tuple[int, float] | None:
    """(N, aggregate) at the highest concurrency of `case` that has a figure."""
    rows = concurrent[(concurrent["case"] == case) & concurrent["aggregate_tps"].notna()]
    if rows.empty:
        return None
    top = rows.loc[rows["concurrency"].idxmax()]
    return int(top["concurrency"]), float(top["aggregate_tps"])
