"""Figures that set runs side by side: differences of their headline figures to a reference
run, whether the same prompt gave the same output on every run (temperature 0 should make it
identical; where not, a speed difference is not only speed), and how throughput scales from one
run (configuration) to another."""

from __future__ import annotations

import numpy as np
import pandas as pd

from loadlib.figures.protocol_tables import CONCURRENT_CASES, ProtocolTables
from loadlib.scenarios.base import ONE_PROMPT_KINDS

SCALING_COLUMNS = ["run", "case", "concurrency", "reference_concurrency", "ratio", "linear", "efficiency"]


def differences(figures: pd.DataFrame, reference: str) -> pd.DataFrame:
    """`headline_figures` of several runs (one `run` column) with `diff_pct`, the difference to
    the reference run's value in percent, and `beyond_noise` where both figures come from at
    least 2 rounds and their min-max ranges do not overlap; NaN and False on the reference's rows."""
    first = figures[figures["run"] == reference].set_index("figure")
    base = figures["figure"].map(first["value"])
    base_low, base_high = figures["figure"].map(first["low"]), figures["figure"].map(first["high"])
    several_rounds = (figures["n"] >= 2) & (figures["figure"].map(first["n"]) >= 2)
    figures = figures.assign(
        diff_pct=(figures["value"] - base) / base * 100,
        beyond_noise=several_rounds & ((figures["low"] > base_high) | (figures["high"] < base_low)),
    )
    figures.loc[figures["run"] == reference, ["diff_pct", "beyond_noise"]] = [np.nan, False]
    return figures


def outputs_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per scenario, the outputs of its successful requests: how many distinct (output hash,
    completion tokens) there were, the most common hash and token count, and the set of them;
    `one_prompt`: whether the scenario is one prompt (its kind in `ONE_PROMPT_KINDS`), so that
    several outputs mean the server varies (a pool of issues or a dataset sends many)."""
    ok = df[df["ok"] & df["output_sha"].notna()]
    grouped = ok.assign(output=ok["output_sha"] + ":" + ok["completion_tokens"].astype(str),
                        one_prompt=ok["kind"].isin(ONE_PROMPT_KINDS)).groupby("scenario", sort=False, observed=True)
    return pd.DataFrame({
        "one_prompt": grouped["one_prompt"].all(),
        "outputs": grouped["output"].nunique(),
        "output_sha": grouped["output_sha"].agg(lambda s: s.mode().iat[0]),
        "completion_tokens": grouped["completion_tokens"].agg(lambda s: s.mode().iat[0]),
        "hashes": grouped["output"].agg(frozenset),
    }).rename_axis("scenario").reset_index()


def output_differences(outputs: pd.DataFrame, reference: str) -> pd.DataFrame:
    """`outputs_table` of several runs (one `run` column) with `differs`: the scenario's outputs
    are not those of the reference run (False on the reference's own rows)."""
    first = outputs[outputs["run"] == reference].set_index("scenario")["hashes"]
    outputs = outputs.assign(differs=[scenario not in first.index or hashes != first[scenario]
                                      for scenario, hashes in zip(outputs["scenario"], outputs["hashes"])])
    outputs.loc[outputs["run"] == reference, "differs"] = False
    return outputs


def scaling(tables: dict[str, ProtocolTables], reference_scenario: str) -> pd.DataFrame:
    """Each run against the first (`tables` in run order): the ratio of their single-stream decode
    of `reference_scenario` (case None, linear 1), then per concurrent case the ratio of their
    aggregate t/s at each one's highest concurrency with a figure, beside the linear expectation
    (the ratio of those concurrencies) and the share of it reached (`efficiency`)."""
    labels = list(tables)
    first = tables[labels[0]]
    rows = []
    for label in labels[1:]:
        other = tables[label]
        rows.append({"run": label, "case": None, "concurrency": 1, "reference_concurrency": 1,
                     "ratio": single_decode(other, reference_scenario) / single_decode(first, reference_scenario),
                     "linear": 1.0})
        for case in CONCURRENT_CASES:
            top, top_first = _top(other.concurrent, case), _top(first.concurrent, case)
            if top is None or top_first is None:
                continue
            rows.append({"run": label, "case": case, "concurrency": top[0], "reference_concurrency": top_first[0],
                         "ratio": top[1] / top_first[1], "linear": top[0] / top_first[0]})
    table = pd.DataFrame(rows, columns=SCALING_COLUMNS)
    table["efficiency"] = table["ratio"] / table["linear"]
    return table


def single_decode(tables: ProtocolTables, scenario: str) -> float:
    """The run's single-stream decode t/s of `scenario` (NaN where it has none)."""
    return float(tables.single["decode_tps"].get(scenario, np.nan))


def _top(concurrent: pd.DataFrame, case: str) -> tuple[int, float] | None:
    """(N, aggregate) at the highest concurrency of `case` that has a figure."""
    rows = concurrent[(concurrent["case"] == case) & concurrent["aggregate_tps"].notna()]
    if rows.empty:
        return None
    top = rows.loc[rows["concurrency"].idxmax()]
    return int(top["concurrency"]), float(top["aggregate_tps"])
