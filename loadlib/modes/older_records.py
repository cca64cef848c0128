"""Records written before their label had a field, read as they were read then: the one place
that still tells a kind of cell by its mode's name or a scenario by its name.

A record carries its label's fields (`loadlib.records.RequestLabel`), and the figures ask those.
A journal from before a field existed has a missing value there; `fill_label_fields` puts in
what the record's other fields said of it at the time, so an older run's report stays what it was:
- `kind`: "long-context" for a scenario named after that kind ("long-context-14k"), "trace" for a
  trace's case; other kinds were never told apart, and stay "";
- `closed_loop`: the cases of the closed and ladder modes (a users search's cells were not told
  apart, and stay open);
- `scheduled_at`: the send time less the wait for a free user (`queue_s`), where there was one;
- `target`: "", the run's one server (journals from before A/B runs).

Only the records frame is read here (`loadlib.record_table.frame_from_columns`): the literals below
are the names the modes had then, not the registry (which the post-processor does not load).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from loadlib.scenarios.base import LONG_CONTEXT_KIND, TRACE_KIND

CLOSED_LOOP_CASES = ("closed", "ladder")
TRACE_CASE = "trace"


def fill_label_fields(df: pd.DataFrame) -> None:
    """Fills in place the label fields that older records of `df` lack (see the module docstring)."""
    kind = df["kind"].isna().to_numpy()
    if kind.any():
        scenario, case = df["scenario"].astype(object), df["case"].astype(object)
        told = np.where(scenario.str.startswith(LONG_CONTEXT_KIND, na=False), LONG_CONTEXT_KIND,
                        np.where(case == TRACE_CASE, TRACE_KIND, ""))
        df["kind"] = df["kind"].astype(object).where(~kind, told)
    closed_loop = df["closed_loop"].isna().to_numpy()
    if closed_loop.any():
        df["closed_loop"] = df["closed_loop"].astype(object).where(~closed_loop, df["case"].isin(CLOSED_LOOP_CASES))
    df["closed_loop"] = df["closed_loop"].astype(bool)
    scheduled = df["scheduled_at"].isna().to_numpy() & df["queue_s"].notna().to_numpy()
    if scheduled.any():
        df.loc[scheduled, "scheduled_at"] = df["sent_at"] - df["queue_s"]
    if df["target"].isna().any():
        df["target"] = df["target"].fillna("")
