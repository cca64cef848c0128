"""Capacity search: whether a level held the SLO, and which level to try next.

Pure (no Locust, no clock): `loadlib.modes.search_driver.SearchDriver` runs each level and brings its records
here; the result goes to the manifest, the summary, the report and the plot.

A level is judged on its measured requests by the criteria the profile's `[slo]` sets (see
`loadlib.figures.goodput.Slo`): TTFT's `ttft_p`th percentile at most `ttft_s`; `decode_p` % of
requests decoding at least `decode_tps` (the slow tail: the (100 - `decode_p`)th percentile of
per-request decode); `goodput`: that share of requests meeting both targets (a failure is a miss;
an answer that came in one read, with no decode rate, is judged on its TTFT, as the steady-state
goodput is). A percentile from a few dozen requests is noisy, so each figure comes with its
uncertainty: the level's requests are resampled with replacement (`bootstrap.RESAMPLES` times,
seeded by the level's cells so a recomputation agrees), and `pass_share` is the share of resamples in which
every criterion holds (the statistics and the rule are `loadlib.figures.capacity`'s, which the
report also uses for its moving-block resamples in send order). TTFT is what a user waits for:
from the intended send where the requests had one (a search over a rate, whose arrivals may wait
for a free user: `capacity.judged_requests`). The level `held` when that share is at least
`CONFIDENCE` and it has enough requests for each percentile judged to be a tail estimate
(`uncertainty.samples_needed`: a p90 of 2 requests is their maximum, and its resamples agree
only because so few requests do), `broke` when it is at most 1 - `CONFIDENCE`, and is `close`
otherwise; a level where
the server failed a request `failed`. A level offered a rate also `broke` when it delivered less
beyond its noise (`capacity.delivery`: its last requests waited longer than its middle ones
beyond both medians' intervals, so the offered rate is above the interval of the rate delivered),
whatever its SLO figures: its queue grew, and a longer level would show it in every figure.
`Judgement.reason` says why in words.

The search climbs from `start` by `step` until a level does not hold, then bisects between the
last level that held and the first that did not, until they are adjacent (users, sessions) or
within `precision` of each other (rate). A level of agent sessions is judged per turn, as a level
of users per request: TTFT from when the turn was due (its wait for a free user included). A close level runs again (`repeats` times) and is judged on all
its runs together; still close, it counts as not held, and the result says so rather than
pretend precision. A level that held at the top (-u, `max_rate`) ends the search there.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from loadlib.figures import formulas
from loadlib.figures.capacity import delivery, judged_requests, quantiles, slo_holds
from loadlib.figures.free_running import SEND, slo_ttft_from
from loadlib.figures.goodput import Slo
from loadlib.figures.slo_resamples import Resample, resampled_statistics, slo_statistics
from loadlib.figures.uncertainty import samples_needed
from loadlib.scenarios.base import level_cell_name

CONFIDENCE = 0.9  # share of resamples that must agree for a verdict
INTERVAL = (0.05, 0.95)  # the figures' uncertainty: this range of their bootstrap distribution
HELD, BROKE, CLOSE, FAILED = "held", "broke", "close", "failed"


@dataclass(frozen=True)
class Judgement:
    """A level's figures with their bootstrap range, and its verdict."""

    n: int  # measured requests
    failed: int
    ttft_p: float  # the percentile of TTFT judged (or shown)
    ttft_s: float | None
    ttft_low: float | None
    ttft_high: float | None
    decode_p: float  # the share of requests that must reach the decode target, in %
    decode_tps: float | None  # the (100 - decode_p)th percentile of per-request decode
    decode_low: float | None
    decode_high: float | None
    goodput: float | None  # share of requests meeting ttft_s and decode_tps (None: no target to meet)
    goodput_low: float | None
    goodput_high: float | None
    pass_share: float  # share of resamples in which every criterion of the SLO held
    verdict: str
    ttft_from: str = SEND  # what TTFT counts from: "intended_send" or "send" (`free_running.slo_ttft_from`)
    offered_rps: float | None = None  # a level of a rate: the rate offered, and what it delivered (`capacity.delivery`)
    delivered_rps: float | None = None
    delivered_low: float | None = None
    delivered_high: float | None = None
    reason: str = ""  # the verdict in words


def judge(frame: pd.DataFrame, slo: Slo, seed: int = 0, offered_rps: float | None = None,
          resample: Resample = resampled_statistics) -> Judgement:
    """Judges one level from its records (`loadlib.record_table.records_frame` rows: `ok`, `ttft_s`,
    `queue_s`, `decode_tps`; and `cell`, `end_at` for a level offered `offered_rps`) against the
    SLO's criteria and, offered a rate, against it (see the module docstring); its resamples drawn
    by `resample` (here, or shared among the workers: the same figures)."""
    ok, ttft, decode = judged_requests(frame)
    meets = formulas.meets_slo(ok, ttft, decode, slo.ttft_s, slo.decode_tps)
    ttft_q, decode_q = quantiles(slo)
    n = len(frame)
    point = slo_statistics(ttft[None, :], decode[None, :], meets[None, :], ttft_q, decode_q)
    boot = resample(ttft, decode, meets, ttft_q, decode_q, seed) if n else np.full((3, 1), np.nan)
    passed = slo_holds(boot, slo)
    pass_share = float(passed.mean()) if n else 0.0
    failed = int((~ok).sum())
    ttft_from = slo_ttft_from(frame)
    delivered = delivery(frame, offered_rps) if offered_rps is not None and n else None
    reasons = [f"{failed} of {n} requests failed"] if failed else []
    reasons.append(f"SLO met in {pass_share:.0%} of resamples"
                   + (" (TTFT from the intended send)" if ttft_from != SEND else ""))
    if offered_rps is not None:
        reasons.append(delivered.words() if delivered is not None else "too few requests to judge the rate delivered")
    if failed:
        verdict = FAILED
    elif delivered is not None and delivered.short:  # its queue grew: whatever its SLO figures
        verdict = BROKE
    elif pass_share >= CONFIDENCE and n < (needed := _samples_needed(slo, ttft_q, decode_q)):
        verdict = CLOSE  # its resamples agree, but a tail percentile of so few requests is no tail estimate
        reasons.append(f"too few requests to hold: the SLO's percentiles need {needed} (longer levels: duration_s)")
    elif pass_share >= CONFIDENCE:
        verdict = HELD
    elif pass_share <= 1 - CONFIDENCE:
        verdict = BROKE
    else:
        verdict = CLOSE
    has_target = slo.ttft_s is not None or slo.decode_tps is not None
    goodput = _figure(point[2, 0], boot[2]) if has_target else (None, None, None)
    rates = (delivered.rate_rps, *delivered.interval) if delivered is not None else (None, None, None)
    return Judgement(n, failed, ttft_q * 100, *_figure(point[0, 0], boot[0]), (1 - decode_q) * 100,
                     *_figure(point[1, 0], boot[1]), *goodput, pass_share, verdict, ttft_from, offered_rps, *rates,
                     "; ".join(reasons))


def _samples_needed(slo: Slo, ttft_q: float, decode_q: float) -> int:
    """The fewest requests whose percentiles the SLO judges are tail estimates
    (`uncertainty.samples_needed`: 10 for a p90); 0 where it judges no percentile."""
    judged = [q for q, percentile in ((ttft_q, slo.ttft_p), (1 - decode_q, slo.decode_p)) if percentile is not None]
    return max((samples_needed(q) for q in judged), default=0)


def _figure(point: float, resampled: np.ndarray) -> tuple[float | None, float | None, float | None]:
    """A figure and the `INTERVAL` range of its resampled values."""
    if not np.isfinite(resampled).any():
        return _finite(point), None, None
    low, high = np.nanquantile(resampled, INTERVAL)
    return _finite(point), _finite(low), _finite(high)


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


# --- the search ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One run of a level: its value, the cell its records carry, and every cell of the level so
    far (this one included), which it is judged on."""

    value: float
    cell: str
    cells: tuple[str, ...]


@dataclass
class Level:
    value: float  # users, sessions, or requests/s
    cells: list[str] = field(default_factory=list)
    judgement: Judgement | None = None

    @property
    def held(self) -> bool:
        return self.judgement is not None and self.judgement.verdict == HELD

    def to_dict(self) -> dict[str, Any]:
        judgement = asdict(self.judgement) if self.judgement is not None else {}
        return {"value": self.value, "cell": self.cells[0], "cells": self.cells, "runs": len(self.cells),
                **judgement}


def cell_name(variable: str, value: float, run: int = 1) -> str:
    """A level's cell: "search-u4" (users or sessions), "search-12rps"; a level run again adds "-r2", "-r3"."""
    if variable != "rate":
        return level_cell_name("search", users=int(value), run=run)
    return level_cell_name("search", rate_rps=value, run=run)


def level_text(variable: str, value: float) -> str:
    """A level in words: "2 users", "1 session", "12 req/s"."""
    if variable == "rate":
        return f"{value:g} req/s"
    noun = "user" if variable == "users" else "session"
    return f"{int(value)} {noun}{'s' if value != 1 else ''}"


class Search:
    """Which level runs next, from the verdicts so far (see the module docstring)."""

    def __init__(self, variable: str, start: float, top: float, step: float = 2.0, precision: float = 0.1,
                 repeats: int = 1) -> None:
        self.variable = variable
        self.top = self._rounded(top)
        self.start = min(self._rounded(start), self.top)
        self.step = step
        self.precision = precision
        self.repeats = repeats
        self.levels: dict[float, Level] = {}  # in the order tried
        self.order: list[float] = []  # values in the order run (a repeated level twice)
        self.stopped = ""  # why the search ended, once it has

    @property
    def best(self) -> float | None:
        """The highest level that held."""
        return max((level.value for level in self.levels.values() if level.held), default=None)

    @property
    def first_bad(self) -> float | None:
        """The lowest level judged and not held (broke, failed, or too close to call)."""
        return min((level.value for level in self.levels.values()
                    if level.judgement is not None and not level.held), default=None)

    def next_step(self) -> Step | None:
        """The next run, or None when the search is over (`stopped` says why)."""
        value = self._next_value()
        if value is None:
            return None
        level = self.levels.get(value) or Level(value)
        cell = cell_name(self.variable, value, len(level.cells) + 1)
        return Step(value, cell, (*level.cells, cell))

    def record(self, step: Step, judgement: Judgement) -> None:
        """A run's judgement (over `step.cells`, every run of its level)."""
        level = self.levels.setdefault(step.value, Level(step.value))
        level.cells = list(step.cells)
        level.judgement = judgement
        self.order.append(step.value)

    def _next_value(self) -> float | None:
        if not self.order:
            return self.start
        last = self.levels[self.order[-1]]
        assert last.judgement is not None
        if last.judgement.verdict == CLOSE and len(last.cells) <= self.repeats:
            return last.value
        good, bad = self.best, self.first_bad
        if bad is None:
            if good is not None and good >= self.top:
                self.stopped = f"held at the top ({self._top_name()} {self._text(self.top)}): the capacity may be higher"
                return None
            assert good is not None  # every level so far held
            return min(self._up(good), self.top)
        first = self.levels[bad].judgement
        if good is None and first is not None and first.verdict == CLOSE:
            self.stopped = (f"the first level ({self._text(bad)}) was too close to call ({first.reason}): judge it on "
                            "more requests (longer levels: duration_s, or more repeats)")
            return None
        if good is None:
            self.stopped = (f"the first level ({self._text(bad)}) did not hold: start lower"
                            if self.variable == "rate" or bad > 1 else
                            f"the first level ({self._text(bad)}) did not hold and there is none lower: this workload "
                            "misses the SLO even alone on the server (loosen the SLO)")
            return None
        middle = self._middle(good, bad)
        if middle is None:
            self.stopped = f"bracketed: {self._text(good)} held, {self._text(bad)} did not"
            return None
        return middle

    def _up(self, value: float) -> float:
        if self.variable != "rate":
            return max(int(value) + 1, math.ceil(value * self.step))
        return self._rounded(value * self.step)

    def _middle(self, good: float, bad: float) -> float | None:
        """The bisection's next level, or None when the bracket is as narrow as it gets."""
        if self.variable != "rate":
            middle = int(good + bad) // 2
        elif bad - good <= self.precision * good:
            return None
        else:
            middle = self._rounded((good + bad) / 2)
        return middle if good < middle < bad and middle not in self.levels else None

    def _rounded(self, value: float) -> float:
        """Users and sessions are whole; rates keep three significant digits (readable cell names)."""
        return int(value) if self.variable != "rate" else float(f"{value:.3g}")

    def _top_name(self) -> str:
        return "max_rate" if self.variable == "rate" else "-u"

    def _text(self, value: float) -> str:
        return level_text(self.variable, value)

    def result(self, slo: Slo) -> dict[str, Any]:
        """The search as the manifest keeps it (and the report shows it): the variable, the SLO
        judged, the best level, the bracket, why it stopped, every level in the order tried."""
        close = [level.value for level in self.levels.values()
                 if level.judgement is not None and level.judgement.verdict == CLOSE]
        return {"variable": self.variable, "slo": asdict(slo), "best": self.best,
                "bracket": [self.best, self.first_bad], "stopped": self.stopped, "too_close": close,
                "levels": [self.levels[value].to_dict() for value in dict.fromkeys(self.order)]}

    def progress(self) -> str:
        """One line for the live view: verdicts so far and the bracket."""
        verdicts = ", ".join(f"{self._text(level.value)} {level.judgement.verdict}"
                             for level in self.levels.values() if level.judgement is not None)
        good, bad = self.best, self.first_bad
        bracket = (f"bracket {self._text(good) if good is not None else 'none'} .. "
                   f"{self._text(bad) if bad is not None else self._text(self.top) + ' (top)'}")
        return f"{verdicts or 'no level judged yet'}; {bracket}"
