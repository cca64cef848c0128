"""`compare`: several runs side by side, one column a run, as the thread's comparison tables.

Differences are percentages against the first run; `*` marks a figure whose min-max range over
rounds does not overlap the first run's, a difference bigger than the noise. Then each run
against the first in words: how their conditions differ (client, versions, launch flags, model,
settings, time), and per figure a verdict, "higher", "lower" or "not distinguishable", with the
difference's 95 % confidence interval from the runs' own samples (`loadlib.figures.verdicts`).
Because a speed difference only means speed when both runs produced the same text, the output of
every prompt is checked across runs (temperature 0 should make it identical).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

import numpy as np
import pandas as pd

from loadlib.figures import across_runs
from loadlib.figures.protocol_tables import scenario_order
from loadlib.report import locust_csv, text
from loadlib.report.document import Document, Section, flatten, rows
from loadlib.report.protocol import MAX_TOKENS_LISTED, max_tokens_phrase, thinking_phrase
from loadlib.report.verdicts import judge
from loadlib.run_view import RunView

SETTINGS = ("model", "target", "tool.version", "server", "protocol.rounds", "protocol.concurrency",
            "protocol.temperature")  # manifest keys (and their sub-keys) worth a row
BEYOND_NOISE = "*"
MISLEADS = "!"
LINE_CHARS = 160  # the settings table is cut to fit: a long value is shortened in the middle
NARROWEST_CELL = 24  # ... but never below this many characters (many runs make a wider table)
CONDITIONS = (("client host", ("client.host", "client.cpu_model", "client.cores")),
              ("tool version", ("tool.version",)),
              ("server version", ("server.kind", "server.version")),
              ("launch flags", ("server.launch", "target.simulator_args")),
              ("model", ("model",)),
              ("workload", ("protocol.scenarios", "protocol.temperature", "profile.request", "profile.scenarios")))
# manifest keys (and their sub-keys) whose difference is named
APART_H = 6.0  # runs started further apart than this differ in time of day (load, heat, neighbours)
CONDITION_CHARS = 40  # a condition's value is shortened to this many characters in the text


def compare(runs: Sequence[RunView]) -> Document:
    """Settings, figures and output determinism of the runs, the first run as the reference; an
    A/B run's or a sweep's servers each a run of their own (`RunView.by_target`). Each run's
    goodput targets are its view's."""
    runs = [view for run in runs for view in run.by_target()]
    labels = [run.label for run in runs]
    figures, judged = judge(runs)
    differ = conditions(runs)
    return Document(
        f"Comparison of {len(runs)} runs, differences against {labels[0]}",  # the columns name them all
        [settings(runs), comparison(figures, labels), differ, judged, determinism(runs),
         locust_csv.side_by_side(runs)],
        summary={"verdicts": rows(judged.data), "conditions": rows(differ.data)})


def settings(runs: list[RunView]) -> Section:
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
        f"{BEYOND_NOISE} = beyond the noise, ranges apart; {MISLEADS} = misleads, read the window aggregate)",
        figures[["figure", "run", "value", "low", "high", "n", "diff_pct", "beyond_noise", "misleads"]], view,
        keys=("figure", "run"), left=("figure",))


def _cell(row: Any) -> str:
    digits = 3 if row.figure.endswith(" s") else 2 if row.figure.endswith(("tok/chunk", " x", "req/s")) else 1
    cell = text.num(row.value, digits)
    if not np.isnan(row.low) and row.low != row.high:
        cell += f" ({text.num(row.low, digits)}–{text.num(row.high, digits)})"
    if not np.isnan(row.diff_pct):
        cell += f" {text.signed_percent(row.diff_pct)}"
    return cell + (BEYOND_NOISE if row.beyond_noise else "") + (f" {MISLEADS}" if row.misleads else "")


def conditions(runs: list[RunView]) -> Section:
    """How each run's conditions differ from the first run's, one row a difference: the
    manifests' `CONDITIONS`, the records' max_tokens and thinking, and the start times when
    they are more than `APART_H` hours apart. One line of text per difference, or one line
    saying there is none."""
    first = runs[0]
    data, lines = [], []
    for run in runs[1:]:
        found = _condition_differences(first, run)
        data += [{"run_a": first.label, "run_b": run.label, "condition": condition, "key": key, "a": a, "b": b}
                 for condition, key, a, b in found]
        for condition in dict.fromkeys(condition for condition, *_ in found):
            changes = [_condition_change(key, a, b) for named, key, a, b in found if named == condition]
            lines.append(_fitted(f"{run.label} against {first.label}: {condition}: ", changes))
        if not found:
            lines.append(f"{run.label} against {first.label}: same client host, tool and server versions, launch "
                         f"flags, model, workload, max_tokens and thinking; started within {APART_H:g} h")
    table = pd.DataFrame(data, columns=["run_a", "run_b", "condition", "key", "a", "b"])
    return Section("conditions", f"Conditions (how each run was taken, against {first.label}; from the manifests "
                   "and records)", table, pd.DataFrame({"conditions": lines}),
                   keys=("run_b", "key"), left=("conditions",))


def _condition_differences(a: RunView, b: RunView) -> list[tuple[str, str, Any, Any]]:
    """(condition, key, value in a, value in b) for each way run b was taken differently."""
    flat_a, flat_b = flatten(a.manifest), flatten(b.manifest)
    found = []
    for condition, prefixes in CONDITIONS:
        keys = [key for key in dict.fromkeys([*flat_a, *flat_b])
                if any(key == prefix or key.startswith(prefix + ".") for prefix in prefixes)]
        found += [(condition, key, flat_a.get(key), flat_b.get(key)) for key in keys
                  if flat_a.get(key) != flat_b.get(key)]
    for condition, phrase in (("max_tokens", _max_tokens_condition),
                              ("thinking", lambda df: thinking_phrase(df["thinking"].unique()))):
        value_a, value_b = phrase(a.records), phrase(b.records)
        if value_a != value_b:
            found.append((condition, condition, value_a, value_b))
    started_a, started_b = _started(a.manifest), _started(b.manifest)
    if started_a and started_b and abs((started_b - started_a).total_seconds()) > APART_H * 3600:
        found.append(("time of day", "started_at", a.manifest["started_at"], b.manifest["started_at"]))
    return found


def _max_tokens_condition(df: pd.DataFrame) -> str | None:
    """The run's max_tokens as a condition: its values, or "drawn per request" where there are more
    than the settings table lists (their range and count follow the run's length, not its set-up;
    how they are drawn is the workload's)."""
    if df["max_tokens"].dropna().nunique() > MAX_TOKENS_LISTED:
        return "drawn per request"
    return max_tokens_phrase(df["max_tokens"])


def _started(manifest: dict[str, Any]) -> datetime | None:
    try:
        return datetime.strptime(str(manifest.get("started_at")), "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None


def _condition_change(key: str, a: Any, b: Any) -> str:
    if key == "started_at":
        hours = abs((_started({"started_at": b}) - _started({"started_at": a})).total_seconds()) / 3600
        return f"started {hours:,.1f} h apart: {a} → {b}"
    values = [text.MISSING if v is None else _shortened(str(v), CONDITION_CHARS) for v in (a, b)]
    return f"{'' if key in ('max_tokens', 'thinking') else key + ' '}{values[0]} → {values[1]}"


def _fitted(head: str, changes: list[str]) -> str:
    """`head` and the changes joined by "; ", as many as fit in `LINE_CHARS`, then how many more."""
    line = head + changes[0]
    for shown, change in enumerate(changes[1:], start=1):
        more = f"; and {len(changes) - shown} more (--json lists them)"
        if len(line) + 2 + len(change) + (len(more) if shown < len(changes) - 1 else 0) > LINE_CHARS - 2:
            return line + more
        line += "; " + change
    return line


def determinism(runs: list[RunView]) -> Section:
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


def _outputs(run: RunView) -> pd.DataFrame:
    table = across_runs.outputs_table(run.records)
    table.insert(1, "run", run.label)
    return table


def _output_cell(row: Any, first_run: bool) -> str:
    if not row.one_prompt:
        return f"{row.outputs} outputs, many prompts"
    if row.outputs > 1:
        return f"{row.outputs} outputs"
    if not first_run and not row.differs:
        return "same"
    return f"{str(row.output_sha)[:8]} {text.num(row.completion_tokens, 0)} tok"


def _verdict(group: pd.DataFrame) -> str:
    if not group["one_prompt"].all():
        return "not judged: many prompts"
    if (group["outputs"] > 1).any():
        return "VARIES within a run"
    return "DIFFERS" if group["differs"].any() else "identical"
