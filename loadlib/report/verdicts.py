"""The verdicts of several runs (or an A/B run's targets) against the first, figure by figure:
"higher", "lower" or "not distinguishable", with the difference's 95 % confidence interval from
each side's own samples (`loadlib.figures.verdicts`), as a table and one sentence a verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd

from loadlib.figures import verdicts
from loadlib.figures.headline import (PROTOCOL_AGGREGATE, WINDOW_AGGREGATE, headline_figures,
                                      leading_honest_figures)
from loadlib.report import text
from loadlib.report.document import Section

if TYPE_CHECKING:
    from loadlib.run_view import RunView

LINE_CHARS = 160  # a sentence wider than this leaves out its "than A" (the title names A)


def judge(runs: Sequence[RunView]) -> tuple[pd.DataFrame, Section]:
    """The runs' headline figures (`headline_figures` against each one's goodput targets, `run` =
    each one's label) and the verdicts of each against the first (`verdicts_section`)."""
    figures = leading_honest_figures(pd.concat([_figures(run).assign(run=run.label) for run in runs],
                                               ignore_index=True))
    return figures, verdicts_section(runs, figures)


def _figures(run: RunView) -> pd.DataFrame:
    """The run's headline figures, then those another tool published without samples (if any)."""
    figures = headline_figures(run.records, run.slo, run.tables, run.steady)
    if run.published is None or run.published.figures.empty:
        return figures
    return pd.concat([figures, run.published.figures], ignore_index=True) if len(figures) else run.published.figures


def verdicts_section(runs: Sequence[RunView], figures: pd.DataFrame) -> Section:
    """Each run against the first, figure by figure in the order of `figures` (the runs' headline
    figures, whose values become `a` and `b`): `verdicts.verdicts_table` with the runs' labels
    (`run_a`, `run_b`), and one sentence a verdict."""
    first = runs[0]
    samples = [verdicts.headline_samples(run.records, run.slo, run.scrapes) for run in runs]
    values = figures.set_index(["run", "figure"])["value"]
    rank = {figure: i for i, figure in enumerate(dict.fromkeys(figures["figure"]))}
    parts = []
    for run, found in zip(runs[1:], samples[1:]):
        table = verdicts.verdicts_table(samples[0], found)
        table = table.iloc[sorted(range(len(table)), key=lambda i: rank.get(table["figure"].iat[i], len(rank)))]
        table = table.assign(a=[values.get((first.label, figure), a) for figure, a in zip(table["figure"], table["a"])],
                             b=[values.get((run.label, figure), b) for figure, b in zip(table["figure"], table["b"])])
        parts.append(table.assign(run_a=first.label, run_b=run.label))
    columns = ["figure", "cell", "run_a", "run_b", *verdicts.VERDICT_COLUMNS[2:]]
    data = pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)
    misled = _misled_runs(figures)
    lines = [_verdict_sentence(row, _caveat(row.figure, misled)) for row in data.itertuples(index=False)]
    lines += [f"{run.label}: {run.published.source}" for run in runs if run.published is not None]
    if data["few_samples"].any():
        lines.append(f"few samples: fewer than {verdicts.FEW_SAMPLES} independent samples on a side (3 rounds, or a "
                     "time series in few blocks); the interval is then about as wide as their whole spread")
    view = pd.DataFrame({"verdicts": lines})
    return Section(
        "verdicts", f"Verdicts against {first.label} (B/A - 1, 95 % bootstrap CI from each run's rounds, requests or "
        f"time bins; within ±{verdicts.EQUIVALENCE_PCT:g} % reads not distinguishable)", data, view,
        keys=("run_b", "figure"), left=("verdicts",))


def _verdict_sentence(row: Any, caveat: str = "") -> str:
    """e.g. "c4-different aggregate t/s (protocol): b is 7.4 % lower than a (95 % CI -8.1 to -6.7 %, n 3/3)",
    then its `caveat`; without "than a" where the line would be wider than `LINE_CHARS` (the title names a)."""
    counts = f"n {row.n_a}/{row.n_b}"
    if row.verdict == verdicts.TOO_FEW:
        claim, reference = f"too few samples to tell {row.run_b}", f" from {row.run_a}"
        detail = f"{_signed(row.diff_pct)} %, {counts}: {row.reason}"
    else:
        counts += ", few samples" if row.few_samples else ""
        interval = f"95 % CI {_signed(row.ci_low_pct)} to {_signed(row.ci_high_pct)} %"
        if row.verdict == verdicts.SAME:
            claim, reference = f"{row.run_b} is not distinguishable", f" from {row.run_a}"
            within = f" within ±{verdicts.EQUIVALENCE_PCT:g} %" if not row.ci_low_pct <= 0 <= row.ci_high_pct else ""
            detail = f"{_signed(row.diff_pct)} %{within}, {interval}, {counts}"
        else:
            claim, reference = f"{row.run_b} is {abs(row.diff_pct):,.1f} % {row.verdict}", f" than {row.run_a}"
            detail = f"{interval}, {counts}"
    sentence = f"{row.figure}: {claim}{reference} ({detail}){caveat}"
    return sentence if len(sentence) <= LINE_CHARS - 2 else f"{row.figure}: {claim} ({detail}){caveat}"


def _misled_runs(figures: pd.DataFrame) -> dict[str, list[str]]:
    """Per figure that misleads on some run (`headline_figures`' `misleads`), those runs' labels;
    the wall-clock aggregate of such a cell is listed under its own name with the same runs."""
    found: dict[str, list[str]] = {}
    for row in figures[figures["misleads"]].itertuples(index=False):
        found.setdefault(row.figure, []).append(row.run)
        if row.figure.endswith(PROTOCOL_AGGREGATE.format("")):
            cell = row.figure[:-len(PROTOCOL_AGGREGATE.format(""))]
            found.setdefault(WINDOW_AGGREGATE.format(cell), []).append(row.run)
    return found


def _caveat(figure: str, misled: dict[str, list[str]]) -> str:
    """What a verdict's reader must know of its figure: the wall-clock aggregate leads where the
    protocol's misleads, which says so."""
    runs = misled.get(figure)
    if not runs:
        return ""
    where = ", ".join(dict.fromkeys(runs))
    if figure.endswith(WINDOW_AGGREGATE.format("")):
        return f"; read this one: the protocol's misleads on {where}"
    return f"; MISLEADS on {where}: streams not run together"


def _signed(value: float) -> str:
    """A signed number with one decimal, "+3.7", "-8.1" (no "-0.0")."""
    return text.MISSING if np.isnan(value) else f"{value:+,.1f}".replace("-0.0", "+0.0")
