"""Figures that set runs side by side: differences of their headline figures to a reference
run, and whether the same prompt gave the same output on every run (temperature 0 should make it
identical; where not, a speed difference is not only speed)."""

from __future__ import annotations

import numpy as np
import pandas as pd


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
    completion tokens) there were, the most common hash and token count, and the set of them."""
    ok = df[df["ok"] & df["output_sha"].notna()]
    grouped = ok.assign(output=ok["output_sha"] + ":" + ok["completion_tokens"].astype(str)).groupby(
        "scenario", sort=False, observed=True)
    return pd.DataFrame({
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
