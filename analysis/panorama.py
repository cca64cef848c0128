"""`panorama`: configurations against (same prompt, different prompts) at every concurrency, and
scaling ratios between runs.

Same prompt is the ideal upper bound (shared prefill through the radix cache, identical drafts);
different prompts is the figure closest to production. Scaling compares each run with the first:
single-stream decode (a router in front should cost nothing, 1.00x) and each run's highest
concurrency against the first run's (two instances at 8 streams against one at 4: near-linear,
2.00x, is the goal).
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from loadlib.figures import across_runs, protocol_tables
from loadlib.figures.protocol_tables import ProtocolTables
from loadlib.report import locust_csv, text
from loadlib.report.document import Document, Section
from loadlib.report.protocol import CASE_LABELS, case_labels
from loadlib.run_view import RunView
from loadlib.scenarios.base import SINGLE

REFERENCE_SCENARIO = "code"


def panorama(runs: Sequence[RunView]) -> Document:
    """The grid of configurations, the scaling ratios, and Locust's totals of each run."""
    tables = {run.label: run.tables for run in runs}
    return Document(f"Panorama of {len(runs)} runs: {', '.join(tables)}",
                    [grid(tables), scaling(tables), locust_csv.side_by_side(list(runs))])


def grid(tables: dict[str, ProtocolTables]) -> Section:
    """One row a run; single-stream code decode, then aggregate t/s per N and case."""
    long = pd.concat([t.concurrent.assign(run=label) for label, t in tables.items()], ignore_index=True)
    kinds = {cell: kind for t in tables.values() for cell, kind in t.kinds.items()}
    long["column"] = [f"{n} × {label}" for n, label in zip(long["concurrency"], case_labels(long, kinds))]
    single = pd.DataFrame({"run": list(tables), "cell": SINGLE, "concurrency": 1,
                           "case": SINGLE,
                           "aggregate_tps": [across_runs.single_decode(t, REFERENCE_SCENARIO) for t in tables.values()],
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
    first = list(tables)[0]
    found = across_runs.scaling(tables, REFERENCE_SCENARIO)
    comparisons = [f"{run} vs {first}: 1 stream {REFERENCE_SCENARIO} decode" if pd.isna(case) else
                   f"{run} c{n} vs {first} c{n_first}: {CASE_LABELS[case]}"
                   for run, case, n, n_first in zip(found["run"], found["case"], found["concurrency"],
                                                    found["reference_concurrency"])]
    data = pd.DataFrame({"comparison": comparisons, "ratio": found["ratio"], "linear": found["linear"],
                         "efficiency": found["efficiency"]}, columns=["comparison", "ratio", "linear", "efficiency"])
    view = pd.DataFrame({"comparison": data["comparison"], "ratio": [text.ratio(v) for v in data["ratio"]],
                         "linear would be": [text.ratio(v) for v in data["linear"]],
                         "of linear": [text.percent(v) for v in data["efficiency"]]})
    return Section("scaling", "Scaling against the first run (each run's highest concurrency against the "
                   "first run's; aggregate t/s, protocol definition)", data, view,
                   keys=("comparison",), left=("comparison",), optional=True)
