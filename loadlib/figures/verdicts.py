"""Whether two runs differ: for each headline figure, the difference in percent with a 95 %
confidence interval and a verdict ("higher", "lower", "not distinguishable", "too few samples"),
from the runs' own samples. Pure functions; `python -m analysis compare` only words them.

The samples (`headline_samples`) are what each figure of `headline.headline_figures` is computed
from, cut into units that are independent of each other (or a time series, whose neighbours are
not), so that the figure is a statistic of its units:

- single stream: the scenario's successful requests, one per round (decode, TTFT, tok/chunk,
  end-to-end: their mean; forward rate: mean decode / mean tok/chunk);
- a concurrency cell: its rounds that count (all N streams succeeded), one unit a round: the
  aggregates are means of per-round values and the per-stream decode the mean of each round's
  mean per-stream decode. The N streams of a round share the server at the same moment, so they
  are not independent samples: the round is the unit, and n counts rounds. The overlaps are
  ratios of those means, the second against the single-stream code requests' decode;
- a cell's TTFT p50/p99: its successful requests, pooled; in a rounds cell resampled by round
  (a round's streams together, and the single stream's scenarios in their proportions);
- the server's accept length of a scenario (its account of speculative decoding, tokens per
  verify step): its requests that carry the account, in send order, each a unit of (accepted
  drafts + verify steps, verify steps), the figure the ratio of their sums; resampled in blocks
  (`bootstrap.block_length` of the requests' own accept lengths), as a prompt repeats round after
  round;
- a cell's tokens per joule (`--gpu-power`): the cell's time cut into units of (completion tokens
  made in it, joules of every GPU), the tokens of each successful request spread evenly from its
  first token to its end, the joules read off the GPU meter's scrapes (`truth.energy.energy_steps`,
  a straight line between two): in rounds, one unit a round (from its start to the next one's),
  independent; otherwise the stretches between the scrapes, a time series resampled in blocks. The
  units span the cell's start and end scrapes, so that the figure is the energy table's;
- a free-running cell (closed, ladder, open, trace, search, a locustfile's own users): a time
  series. TTFT: its requests in send order. Steady decode t/s and goodput: the steady window cut
  into equal time bins (`MAX_BINS` at most, no more than the window's requests), each bin's
  figures those `free_running.steady_state_table` gives for the bin as a window (decode tokens
  delivered in it per second; requests sent in it that met the SLO, per second), so that the
  mean of the bins is the figure.

The interval (`verdict`): a seeded bootstrap of B/A - 1, the two runs resampled independently
(`loadlib.figures.bootstrap`: `RESAMPLES` times, the circular block bootstrap). Independent units
are resampled one at a time; a time series in blocks of `bootstrap.block_length` units, so that
its autocorrelation (a slow request holds back the next ones; load comes in waves) widens the
interval as it should instead of passing for more evidence than there is. The interval is the
percentile interval, expanded for small samples (Hesterberg 2015, "What teachers should know
about the bootstrap"): the plain percentile bootstrap is too narrow with few units (it misses
the truth far more than 5 % of the time with 3 rounds), so its tails are taken at
`Phi(-sqrt(n/(n-1)) t_{n-1})` instead of 2.5 %, with n the smallest number of independent units
(units / block) on either side. With 3 rounds that is as wide as the bootstrap goes: about the
range of the rounds' ratios; with 30 units it is hardly wider than the plain interval.

The verdict: "higher" or "lower" when the interval excludes 0 and the difference is beyond
+-`EQUIVALENCE_PCT` (1 %); otherwise "not distinguishable". Two runs of one configuration on
one machine differ by up to about half a percent in decode (the simulator, 3 rounds), often with
an interval that excludes 0 (runs taken minutes apart do not share all their conditions); a
difference within 1 % is not one to act on, so it reads "not distinguishable" whatever its
interval. "too few samples" when either run has fewer than 2 units, or a percentile fewer
values than it needs to say anything about the tail (`uncertainty.samples_needed`: a p99 needs
100, below that it is the largest values' neighbourhood).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pandas as pd

from loadlib.figures import free_running
from loadlib.figures.goodput import Slo
from loadlib.figures.protocol_tables import CONCURRENT_CASES, round_aggregates
from loadlib.figures.bootstrap import RESAMPLES, block_length, resampled, row_quantiles
from loadlib.figures.uncertainty import LEVEL, samples_needed
from loadlib.truth import energy, server_figures
from loadlib.scenarios.base import SINGLE

SEED = 24  # one seed for every interval: the same runs always give the same output
EQUIVALENCE_PCT = 1.0  # differences within +-1 % read "not distinguishable" (see the module's doc)
FEW_SAMPLES = 5  # below this many independent units on either side an interval is a rough one
MAX_BINS = 100  # time bins of a free-running cell's steady window
REFERENCE_SCENARIO = "code"  # the single-stream decode the overlap vs single-stream divides by

HIGHER, LOWER, SAME, TOO_FEW = "higher", "lower", "not distinguishable", "too few samples"

VERDICT_COLUMNS = ["figure", "cell", "a", "b", "diff_pct", "ci_low_pct", "ci_high_pct", "verdict", "n_a",
                   "n_b", "few_samples", "reason"]

Estimator = Callable[[Sequence[np.ndarray]], np.ndarray]
"""A figure as a function of resampled units: one (resamples, units, width) array per group of
the sample, one value per resample."""


# --- estimators: a figure from its units ------------------------------------------------------------

def mean(column: int = 0) -> Estimator:
    """The mean of one column of the units, NaN left out."""
    return lambda groups: _nanmean(groups[0][..., column])


def ratio_of_means() -> Estimator:
    """Mean of column 0 / mean of column 1 (each NaN left out): forward rate, overlap."""
    return lambda groups: _nanmean(groups[0][..., 0]) / _nanmean(groups[0][..., 1])


def ratio_across_groups() -> Estimator:
    """Mean of the first group / mean of the second: a cell's aggregate against other requests."""
    return lambda groups: _nanmean(groups[0][..., 0]) / _nanmean(groups[1][..., 0])


def quantile(q: float) -> Estimator:
    """The q-quantile of all the units' values pooled (NaN left out; linear, as pandas)."""
    return lambda groups: row_quantiles(groups[0].reshape(len(groups[0]), -1), q)


def _nanmean(values: np.ndarray) -> np.ndarray:
    """Mean over the last axis, NaN left out (NaN where nothing is left), without warnings."""
    present = ~np.isnan(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(present, values, 0.0).sum(axis=-1) / present.sum(axis=-1)


# --- samples ------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Sample:
    """The units one figure of one run is computed from, and how.

    `groups` holds one (units, width) array per independently resampled group (most figures have
    one; the overlap vs single-stream decode has two), units in time order, NaN where a unit has
    fewer values than the width; `blocks` the block length of each (1: independent units);
    `min_values` how many values the first group needs for the figure to say anything."""

    groups: tuple[np.ndarray, ...]
    blocks: tuple[int, ...]
    estimator: Estimator
    min_values: int = 2

    @classmethod
    def of(cls, values: np.ndarray, estimator: Estimator | None = None, block: int = 1,
           min_values: int = 2) -> Sample:
        """One group: `values` 1-D (one value a unit) or 2-D (units x values)."""
        units = np.asarray(values, dtype="float64")
        units = units[:, None] if units.ndim == 1 else units
        return cls((units,), (block,), estimator or mean(), min_values)

    @property
    def n(self) -> int:
        """Units of the first group: rounds, requests or time bins."""
        return len(self.groups[0])

    @property
    def independent(self) -> float:
        """The fewest independent units of any group: units / block."""
        return min(len(units) / block for units, block in zip(self.groups, self.blocks))

    @property
    def value(self) -> float:
        """The figure itself, from all the units."""
        return float(self.estimator([units[None] for units in self.groups])[0])

    def shortage(self) -> str | None:
        """Why the sample is too small to compare, or None."""
        if min(len(units) for units in self.groups) < 2:
            return "fewer than 2 samples"
        values = int((~np.isnan(self.groups[0])).sum())
        if values < self.min_values:
            return f"{values} values where it needs {self.min_values}"
        return None


@dataclass(frozen=True)
class FigureSample:
    """A headline figure of one run (named as `headline_figures` names it), its cell and its sample."""

    figure: str
    cell: str
    sample: Sample


@dataclass(frozen=True)
class Verdict:
    """B against A: (B/A - 1) in percent, its interval (NaN without one), the verdict, the units
    on each side, whether either side has fewer than `FEW_SAMPLES` independent units (its
    interval is then about as wide as their spread), and why there is no interval (None when
    there is)."""

    diff_pct: float
    ci_low_pct: float
    ci_high_pct: float
    verdict: str
    n_a: int
    n_b: int
    few_samples: bool
    reason: str | None = None


# --- the interval and the verdict ------------------------------------------------------------------

def verdict(a: Sample, b: Sample, seed: int = SEED, resamples: int = RESAMPLES, level: float = LEVEL,
            margin_pct: float = EQUIVALENCE_PCT) -> Verdict:
    """B against A (see the module's doc). The figures must be positive numbers."""
    value_a, value_b = a.value, b.value
    if not (value_a > 0 and math.isfinite(value_a) and math.isfinite(value_b)):
        raise ValueError(f"no ratio of {value_b} to {value_a}")
    diff = (value_b / value_a - 1) * 100
    few = min(a.independent, b.independent) < FEW_SAMPLES
    short = a.shortage() or b.shortage()
    if short:
        return Verdict(diff, math.nan, math.nan, TOO_FEW, a.n, b.n, few, short)
    low, high = ratio_interval(a, b, seed, resamples, level)
    if math.isnan(low):
        return Verdict(diff, low, high, TOO_FEW, a.n, b.n, few, "most resamples have no ratio")
    beyond = abs(diff) > margin_pct and not low <= 0 <= high
    return Verdict(diff, low, high, (HIGHER if diff > 0 else LOWER) if beyond else SAME, a.n, b.n, few)


def ratio_interval(a: Sample, b: Sample, seed: int = SEED, resamples: int = RESAMPLES,
                   level: float = LEVEL) -> tuple[float, float]:
    """The bootstrap interval of (B/A - 1) in percent: each run resampled independently
    (`bootstrap`), percentiles expanded for the fewest independent units on either side."""
    rng = np.random.default_rng(seed)
    resampled_a = bootstrap(a, rng, resamples)  # A's resamples first, then B's, from one seeded stream
    resampled_b = bootstrap(b, rng, resamples)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = (resampled_b / resampled_a - 1) * 100
    ratios = ratios[np.isfinite(ratios)]
    if len(ratios) < resamples / 2:
        return math.nan, math.nan
    tail = expanded_tail(level, min(a.independent, b.independent))
    low, high = np.quantile(ratios, [tail, 1 - tail])
    return float(low), float(high)


def bootstrap(sample: Sample, rng: np.random.Generator, resamples: int = RESAMPLES) -> np.ndarray:
    """The figure over `resamples` resamples of the sample (`bootstrap.resampled`), each group in
    its own block length."""
    return resampled(lambda index: sample.estimator([units[rows] for units, rows in zip(sample.groups, index)]),
                     [len(units) for units in sample.groups], sample.blocks, rng, resamples,
                     widths=[units.shape[1] for units in sample.groups])


def expanded_tail(level: float, independent: float) -> float:
    """The bootstrap distribution's tail probability for a `level` interval from `independent`
    units (Hesterberg's expanded percentile): Phi(-sqrt(n/(n-1)) t_{n-1}) instead of (1-level)/2,
    so that with few units the interval is as wide as a t interval would be. At least 2 units."""
    n = max(independent, 2.0)
    return NormalDist().cdf(-math.sqrt(n / (n - 1)) * t_quantile(1 - (1 - level) / 2, n - 1))


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile, by the Cornish-Fisher expansion (Abramowitz & Stegun 26.7.5): within
    1 % from 2 degrees of freedom up (4.27 for 4.30 at df 2, p 0.975), 11 % low at 1."""
    z = NormalDist().inv_cdf(p)
    g = ((z ** 3 + z) / 4,
         (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96,
         (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384,
         (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160)
    return z + sum(term / df ** (i + 1) for i, term in enumerate(g))


def verdicts_table(a: dict[str, FigureSample], b: dict[str, FigureSample], **options: float) -> pd.DataFrame:
    """B against A for every figure both runs have a positive value of (`headline_samples`), in
    A's order: `VERDICT_COLUMNS`, with a and b the two figures. `options` go to `verdict`."""
    rows = []
    for figure, first in a.items():
        other = b.get(figure)
        if other is None:
            continue
        value_a, value_b = first.sample.value, other.sample.value
        if not (value_a > 0 and math.isfinite(value_a) and math.isfinite(value_b)):
            continue
        found = verdict(first.sample, other.sample, **options)
        rows.append({"figure": figure, "cell": first.cell, "a": value_a, "b": value_b,
                     "diff_pct": found.diff_pct, "ci_low_pct": found.ci_low_pct, "ci_high_pct": found.ci_high_pct,
                     "verdict": found.verdict, "n_a": found.n_a, "n_b": found.n_b, "few_samples": found.few_samples,
                     "reason": found.reason})
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


# --- the samples of the headline figures -----------------------------------------------------------

def headline_samples(df: pd.DataFrame, slo: Slo, scrapes: Sequence[dict] = ()) -> dict[str, FigureSample]:
    """Each headline figure's sample (see the module's doc), by the figure's name in
    `headline_figures`, then the server's accept length per scenario and, from the run's parsed
    scrapes, each cell's tokens per joule; `slo` sets goodput's targets. Figures without units are
    left out."""
    found = [*_single_samples(df), *_concurrent_samples(df), *_steady_samples(df, slo), *_ttft_samples(df),
             *_accept_samples(df), *energy_samples(scrapes, df)]
    return {sample.figure: sample for sample in found}


def _accept_samples(df: pd.DataFrame) -> list[FigureSample]:
    own = df[df["ok"] & df["spec_verify_steps"].notna() & df["spec_accepted_tokens"].notna()
             & (df["spec_verify_steps"] > 0)].sort_values("sent_at", kind="stable")
    found = []
    for scenario, group in own.groupby("scenario", sort=False, observed=True):
        steps = group["spec_verify_steps"].to_numpy(dtype="float64")
        tokens = group["spec_accepted_tokens"].to_numpy(dtype="float64") + steps
        found.append(FigureSample(f"{scenario} accept length (server)", "per scenario", Sample.of(
            np.column_stack([tokens, steps]), ratio_of_means(), block_length(tokens / steps))))
    return found


def energy_samples(scrapes: Sequence[dict], df: pd.DataFrame) -> list[FigureSample]:
    """Each measured cell's tokens per joule (named as the energy table names its row: "single
    code tokens/J", "c2-same tokens/J") as a sample of the cell's time cut into units (see the
    module's doc); none without a GPU meter."""
    ok = df[df["ok"] & df["completion_tokens"].notna()]
    found = []
    for span, steps in energy.energy_steps(scrapes).items():
        own = server_figures.cell_records(ok, span)
        if own.empty or not steps:
            continue
        # the cumulative joules of every GPU at each scrape of the cell, read between them as a line
        at = np.array([steps[0][0], *(t1 for _t0, t1, _joules in steps)])
        joules = np.concatenate([[0.0], np.cumsum([j for _t0, _t1, j in steps])])
        rounds = own["round"].to_numpy()
        if own["case"].iat[0] in (SINGLE, *CONCURRENT_CASES) and len(set(rounds)) > 1:
            starts = own.groupby("round", sort=True)["sent_at"].min().to_numpy(dtype="float64")
            edges, block = np.array([at[0], *starts[1:], at[-1]]), 1  # each round to the next one's start
        else:
            edges = at
            block = 0  # a time series: its own block length
        first = own["first_token_at"].to_numpy(dtype="float64")
        end = own["end_at"].to_numpy(dtype="float64")
        first = np.where(np.isnan(first), end, first)
        comp = own["completion_tokens"].to_numpy(dtype="float64")
        units = np.array([[float((comp * np.clip((np.minimum(end, t1) - np.maximum(first, t0))
                                                 / np.maximum(end - first, 1e-9), 0.0, 1.0)).sum()),
                           float(np.interp(t1, at, joules) - np.interp(t0, at, joules))]
                          for t0, t1 in zip(edges[:-1], edges[1:])])
        name = f"{span.cell} {server_figures.cell_scenario(span, own)}".strip()
        found.append(FigureSample(f"{name} tokens/J", span.cell, Sample.of(
            units, ratio_of_means(), block or block_length(units[:, 0] / units[:, 1]))))
    return found


def _single_samples(df: pd.DataFrame) -> list[FigureSample]:
    single = df[(df["case"] == SINGLE) & df["ok"]].sort_values("sent_at", kind="stable")
    found = []
    for scenario, group in single.groupby("scenario", sort=False, observed=True):
        columns = {name: group[name].to_numpy(dtype="float64")
                   for name in ("decode_tps", "ttft_s", "tok_per_chunk", "e2e_tps")}
        found += [FigureSample(f"{scenario} decode t/s", SINGLE, Sample.of(_present(columns["decode_tps"]))),
                  FigureSample(f"{scenario} TTFT s", SINGLE, Sample.of(_present(columns["ttft_s"]))),
                  FigureSample(f"{scenario} tok/chunk", SINGLE, Sample.of(_present(columns["tok_per_chunk"]))),
                  FigureSample(f"{scenario} end-to-end t/s", SINGLE, Sample.of(_present(columns["e2e_tps"]))),
                  FigureSample(f"{scenario} forward rate /s", SINGLE,
                               Sample.of(np.column_stack([columns["decode_tps"], columns["tok_per_chunk"]]),
                                         ratio_of_means()))]
    return found


def _present(values: np.ndarray) -> np.ndarray:
    return values[~np.isnan(values)]


def _concurrent_samples(df: pd.DataFrame) -> list[FigureSample]:
    rounds = round_aggregates(df)
    complete = rounds[rounds["complete"]].sort_values("round", kind="stable")
    reference = df[(df["case"] == SINGLE) & df["ok"] & (df["scenario"] == REFERENCE_SCENARIO)]
    single_decode = _present(reference.sort_values("sent_at", kind="stable")["decode_tps"].to_numpy(dtype="float64"))
    found = []
    for cell, group in complete.groupby("cell", sort=False, observed=True):
        aggregate, window, stream = (group[name].to_numpy(dtype="float64")
                                     for name in ("aggregate_tps", "window_tps", "stream_decode_tps"))
        cell = str(cell)
        found += [FigureSample(f"{cell} aggregate t/s (protocol)", cell, Sample.of(aggregate)),
                  FigureSample(f"{cell} aggregate t/s (window)", cell, Sample.of(window)),
                  FigureSample(f"{cell} per-stream decode t/s", cell, Sample.of(stream)),
                  FigureSample(f"{cell} overlap vs per-stream decode x", cell,
                               Sample.of(np.column_stack([aggregate, stream]), ratio_of_means()))]
        if len(single_decode):
            found.append(FigureSample(f"{cell} overlap vs single-stream decode x", cell, Sample(
                (aggregate[:, None], single_decode[:, None]), (1, 1), ratio_across_groups())))
    return found


def _steady_samples(df: pd.DataFrame, slo: Slo) -> list[FigureSample]:
    found = []
    for cell, group, origin, sent, end, start, stop in free_running.steady_cells(df):
        bins = min(MAX_BINS, int(free_running.steady_requests(sent, start, stop).sum()))
        if stop <= start or bins < 1:
            continue
        edges = np.linspace(start, stop, bins + 1)
        # each bin as a window of its own: the steady-state table's own decode t/s and goodput of it,
        # so the bins' mean is the whole window's figure by the table's one definition. A window holds
        # the requests sent at both its ends: a bin ends just before the next begins, or a request
        # sent on an edge (a schedule's round times) would count twice
        highs = np.append(np.nextafter(edges[1:-1], -np.inf), stop)
        per_bin = free_running.steady_state_table(df, slo.ttft_s, slo.decode_tps, cells=[
            (cell, group, origin, sent, end, low, high) for low, high in zip(edges[:-1], highs)])
        decode, goodput = (per_bin[name].to_numpy(dtype="float64") for name in ("decode_tps", "goodput_rps"))
        found += [FigureSample(f"{cell} steady all-streams t/s", cell, Sample.of(decode, block=block_length(decode))),
                  FigureSample(f"{cell} goodput req/s", cell, Sample.of(goodput, block=block_length(goodput)))]
    return found


def _ttft_samples(df: pd.DataFrame) -> list[FigureSample]:
    ok = df.loc[df["ok"], ["cell", "case", "round", "sent_at", "ttft_s"]].sort_values("sent_at", kind="stable")
    found = []
    for cell, group in ok.groupby("cell", sort=False, observed=True):
        ttft = group["ttft_s"].to_numpy(dtype="float64")
        if group["case"].iat[0] in (SINGLE, *CONCURRENT_CASES):
            units, block = _by_round(group["round"].to_numpy(), ttft), 1
        else:
            units, block = ttft[:, None], block_length(ttft)
        cell = str(cell)
        found += [FigureSample(f"{cell} TTFT p{round(q * 100)} s", cell,
                               Sample.of(units, quantile(q), block, min_values=samples_needed(q))) for q in (0.5, 0.99)]
    return found


def _by_round(rounds: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Values grouped into one row per round (rounds in order), NaN-padded to the fullest round."""
    order = np.argsort(rounds, kind="stable")
    rounds, values = rounds[order], values[order]
    starts = np.flatnonzero(np.diff(rounds, prepend=np.nan) != 0)
    sizes = np.diff(np.append(starts, len(rounds)))
    units = np.full((len(starts), int(sizes.max(initial=1))), np.nan)
    for row, (start, size) in enumerate(zip(starts, sizes)):
        units[row, :size] = values[start:start + size]
    return units
