"""`compare`: several runs side by side, one column a run, as the thread's comparison tables.

Differences are percentages against the first run; `*` marks a figure whose min-max range over
rounds does not overlap the first run's, a difference bigger than the noise. Because a speed
difference only means speed when both runs produced the same text, the output of every prompt
is checked across runs (temperature 0 should make it identical).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis import locust_csv
from analysis.rundir import Run
from loadlib.figures import across_runs
from loadlib.figures.goodput import goodput_slo
from loadlib.figures.headline import headline_figures
from loadlib.figures.protocol_tables import scenario_order
from loadlib.report import text
from loadlib.report.document import Document, Section, flatten
from loadlib.report.protocol import MAX_TOKENS_LISTED, thinking_phrase

SETTINGS = ("model", "target", "tool.version", "server", "protocol.rounds", "protocol.concurrency",
            "protocol.temperature")  # manifest keys (and their sub-keys) worth a row
BEYOND_NOISE = "*"
LINE_CHARS = 160  # the settings table is cut to fit: a long value is shortened in the middle
NARROWEST_CELL = 24  # ... but never below this many characters (many runs make a wider table)


def compare(runs: list[Run], slo_ttft_s: float | None = None, slo_decode_tps: float | None = None) -> Document:
    """Settings, figures and output determinism of the runs, the first run as the reference.

    Goodput targets not given come from each run's own profile."""
    labels = [run.label for run in runs]
    figures = pd.concat([headline_figures(run.records, goodput_slo(run.manifest, slo_ttft_s, slo_decode_tps))
                         .assign(run=run.label) for run in runs], ignore_index=True)
    return Document(
        f"Comparison of {len(runs)} runs, differences against {labels[0]}",  # the columns name them all
        [settings(runs), comparison(figures, labels), determinism(runs),
         locust_csv.side_by_side(runs)])


def settings(runs: list[Run]) -> Section:
    """What each run measured: the manifest's target and model, and the settings in its records."""
    labels = [run.label for run in runs]
    rows: dict[str, dict[str, Any]] = {}
    for run in runs:
        df = run.records
        found = {
            **{key: value for key, value in flatten(run.manifest).items()
               if any(key == s or key.startswith(s + ".") for s in SETTINGS)},
            "max_tokens": max_tokens_phrase(df["max_tokens"]),
            "thinking": thinking_phrase(df["thinking"].unique()),
            "requests": len(df), "failed": int((~df["ok"]).sum()),
        }
        for key, value in found.items():
            rows.setdefault(key, {})[run.label] = value
    data = pd.DataFrame.from_dict(rows, orient="index", columns=labels)
    data = data.rename_axis("setting").reset_index()
    view = data.map(lambda v: text.MISSING if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))
    name_chars = int(view["setting"].str.len().max()) if len(view) else 0
    cell_chars = max(NARROWEST_CELL, (LINE_CHARS - 2 - name_chars) // len(runs) - 3)  # indent 2, gaps 3
    view[labels] = view[labels].map(lambda value: _shortened(value, cell_chars))
    return Section("settings", "Settings (long values shortened with …; --json and --csv keep them whole)",
                   data, view, keys=("setting",), left=tuple(data.columns))


def max_tokens_phrase(max_tokens: pd.Series) -> str | None:
    """The run's max_tokens: each value, or the range and count where lengths were drawn per
    request (synthetic, dataset, trace), as the summary's settings line writes them."""
    values = sorted(int(v) for v in max_tokens.dropna().unique())
    if len(values) > MAX_TOKENS_LISTED:
        return f"{values[0]}–{values[-1]} ({len(values)} values)"
    return "/".join(map(str, values)) or None


def _shortened(value: str, chars: int) -> str:
    """`value` in at most `chars` characters: its start and its end around "…" (a model path
    keeps the model's name, a list its first and last items)."""
    if len(value) <= chars:
        return value
    head = (chars - 1) // 2
    return value[:head] + "…" + value[len(value) - (chars - 1 - head):]


def comparison(figures: pd.DataFrame, labels: list[str]) -> Section:
    """One row a figure, one column a run: value, range, % against the first run, noise marker."""
    figures = across_runs.differences(figures, labels[0])
    cells = [_cell(row) for row in figures.itertuples(index=False)]
    order = list(dict.fromkeys(figures["figure"]))
    view = text.grid(figures.assign(cell=cells), "figure", "run", order, labels)
    return Section(
        "comparison", f"Figures per run (value, range over rounds, difference to {labels[0]}; "
        f"{BEYOND_NOISE} = ranges do not overlap, beyond the noise)",
        figures[["figure", "run", "value", "low", "high", "n", "diff_pct", "beyond_noise"]], view,
        keys=("figure", "run"), left=("figure",))


def _cell(row: Any) -> str:
    digits = 3 if row.figure.endswith(" s") else 2 if row.figure.endswith(("tok/chunk", " x", "req/s")) else 1
    cell = text.num(row.value, digits)
    if not np.isnan(row.low) and row.low != row.high:
        cell += f" ({text.num(row.low, digits)}–{text.num(row.high, digits)})"
    if not np.isnan(row.diff_pct):
        cell += f" {text.signed_percent(row.diff_pct)}"
    return cell + (BEYOND_NOISE if row.beyond_noise else "")


def determinism(runs: list[Run]) -> Section:
    """Per prompt: the output hash and completion tokens of each run, flagged where they differ."""
    data = across_runs.output_differences(pd.concat([_outputs(run) for run in runs], ignore_index=True),
                                          runs[0].label)
    view_cells = [_output_cell(row, first_run=row.run == runs[0].label) for row in data.itertuples(index=False)]
    scenarios = sorted(data["scenario"].unique(), key=scenario_order)
    view = text.grid(data.assign(cell=view_cells), "scenario", "run", scenarios, [run.label for run in runs])
    verdicts = {scenario: _verdict(group) for scenario, group in data.groupby("scenario", observed=True)}
    view["verdict"] = [verdicts[scenario] for scenario in scenarios]
    return Section(
        "determinism", "Output determinism (at temperature 0 a prompt should give the same output hash and "
        "completion tokens on every run; if not, a speed difference is not only speed)",
        data.drop(columns="hashes"), view, keys=("scenario", "run"), left=("scenario", "verdict"))


def _outputs(run: Run) -> pd.DataFrame:
    table = across_runs.outputs_table(run.records)
    table.insert(1, "run", run.label)
    return table


def _output_cell(row: Any, first_run: bool) -> str:
    if row.outputs > 1:
        return f"{row.outputs} outputs"
    if not first_run and not row.differs:
        return "same"
    return f"{str(row.output_sha)[:8]} {text.num(row.completion_tokens, 0)} tok"


def _verdict(group: pd.DataFrame) -> str:
    if (group["outputs"] > 1).any():
        return "VARIES within a run"
    return "DIFFERS" if group["differs"].any() else "identical"
