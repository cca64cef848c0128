"""The capacity search's section: where the server holds and where it breaks, how sure each is, what
it delivered there, and whether Little's law agrees; then every level the search tried.

It formats what the search's result in the manifest kept (`loadlib.modes.search`: the verdicts,
the figures and their ranges) beside the table `loadlib.figures.capacity.level_table` computes from
the records (the moving-block resamples, requests/s delivered, Little's law); it computes nothing.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import pandas as pd

from loadlib.figures import bootstrap, capacity, uncertainty
from loadlib.figures.free_running import INTENDED_SEND
from loadlib.modes import search
from loadlib.report import text
from loadlib.report.document import Section

SEARCHED = {"users": "closed-loop users", "rate": "the open-loop rate", "sessions": "agent sessions"}
SEARCH_COLUMNS = ["value", "cells", "n", "failed", "ttft_p", "ttft_s", "ttft_low", "ttft_high", "decode_p",
                  "decode_tps", "decode_low", "decode_high", "goodput", "goodput_low", "goodput_high", "pass_share",
                  "verdict", "ttft_from", "reason"]


def search_section(manifest: Mapping[str, Any], levels: pd.DataFrame) -> Section:
    """The capacity search as the run's manifest kept it, with `levels` (`capacity.level_table`,
    one row per level in the same order): the bracket in the title (`search_title`), then every
    level in the order tried with its SLO figures, their bootstrap ranges, requests/s delivered,
    the share of resamples that met the SLO (of single requests: the verdict's; in blocks: the
    title's), its verdict, and Little's law."""
    result = manifest.get("search") or {}
    table = pd.DataFrame(result.get("levels") or [], columns=SEARCH_COLUMNS)
    if table.empty:
        return Section("search", "", table, pd.DataFrame(), optional=True)
    levels = levels.reset_index(drop=True).reindex(table.index)  # a level without records: NaN
    data = pd.concat([table.assign(cells=[",".join(cells) for cells in table["cells"]]),
                      levels.drop(columns=["value", "n"])], axis=1)
    variable = result["variable"]
    users = variable != "rate"
    ttft_p, decode_p = table["ttft_p"].iloc[0], table["decode_p"].iloc[0]
    intended = (table["ttft_from"] == INTENDED_SEND).any()
    return Section(
        "search", search_title(result, levels), data,
        pd.DataFrame({
            "req/s" if variable == "rate" else variable: [f"{value:g}" for value in table["value"]],
            "cells": [", ".join(cells) for cells in table["cells"]],
            "n": text.column(table["n"], 0), "failed": text.column(table["failed"], 0),
            f"TTFT p{ttft_p:g} s{' (intended send)' if intended else ''}": _ranged(
                table["ttft_s"], table["ttft_low"], table["ttft_high"], 3),
            f"decode p{100 - decode_p:g} t/s": _ranged(table["decode_tps"], table["decode_low"],
                                                       table["decode_high"], 0),
            "goodput": [text.MISSING if pd.isna(v) else f"{text.percent(v)} ({text.percent(lo)}–{text.percent(hi)})"
                        for v, lo, hi in zip(table["goodput"], table["goodput_low"], table["goodput_high"])],
            "delivered req/s": (text.column(levels["delivered_rps"], 2) if users else
                                _ranged(levels["delivered_rps"], levels["delivered_low_rps"],
                                        levels["delivered_high_rps"], 2)),
            "SLO met in": [text.percent(v) for v in table["pass_share"]],
            "in blocks": [text.percent(v) for v in levels["pass_share_blocks"]],
            "verdict": table["verdict"].astype(str),
            "Little": [_little_cell(gap, holds) for gap, holds in zip(levels["little_gap"], levels["little_holds"])],
        }), keys=("value",), left=("cells", "verdict"), optional=True)


def search_title(result: Mapping[str, Any], levels: pd.DataFrame) -> str:
    """The search's headline: where it holds and where it breaks (in its variable and in requests/s
    delivered, each with its share of moving-block resamples that met the SLO), Little's law
    there, the SLO, why the search stopped, and how a level was judged."""
    variable = result["variable"]
    users = variable != "rate"
    unit = _unit(variable)
    by_value = {row["value"]: row for row in levels.to_dict("records") if row.get("value") is not None}
    good, bad = (result.get("bracket") or [result.get("best"), None])[:2]
    holds = (f"holds at {_level(good, by_value.get(good), variable)}" if good is not None
             else "holds at no level")
    breaks = (f"breaks at {_level(bad, by_value.get(bad), variable)}" if bad is not None
              else "no level broke")
    close = result.get("too_close") or []
    note = f"; too close to call after every run: {', '.join(unit(v) for v in close)}" if close else ""
    little_sides = {"users": "the level's users against its throughput",
                    "rate": "the mean in flight measured against the rate offered",
                    "sessions": "not for sessions: a lane idles between turns while its agent thinks"}[variable]
    little = _little_text([(v, by_value.get(v)) for v in (good, bad) if v is not None], variable)
    return (f"Capacity search over {SEARCHED[variable]}: {holds}; {breaks}"
            f"{'; ' + little if little else ''} "
            f"(SLO {slo_text(result.get('slo') or {})}); {result.get('stopped') or 'not finished'}{note}. "
            f"Each level judged on its requests: range = {search.INTERVAL[0]:.0%}-{search.INTERVAL[1]:.0%} of "
            f"{bootstrap.RESAMPLES} bootstrap resamples, 'SLO met in' = share of resamples meeting every criterion "
            f"(held at >= {search.CONFIDENCE:.0%} with enough requests for its percentiles (10 for a p90), broke at "
            f"<= {1 - search.CONFIDENCE:.0%}, close between; "
            "failed: the server failed requests); 'in blocks' (the shares above) = the same over "
            f"{bootstrap.RESAMPLES} block resamples of its requests in send order (blocks as long as its TTFT, decode "
            f"and SLO met move together from one request to the next, so a slow spell stays together); "
            f"{_delivered_note(variable)}Little = in flight against req/s x mean latency "
            f"({little_sides}; 'ok' within {capacity.LITTLE_TOLERANCE:.0%})")


def _delivered_note(variable: str) -> str:
    """What 'delivered req/s' is, and for a rate how it judges the level."""
    window = "over each cell's steady window: delivered req/s = successful requests ended per second, "
    closed = {"users": "", "sessions": "a level's requests are its sessions' turns, TTFT from when each was due (its "
                                       "wait for a free user included); "}
    if variable in closed:
        return closed[variable] + window
    return ("TTFT counts from the intended send (the wait for a free user included); delivered req/s = the rate "
            "the level kept pace with: the requests between the median ones of its middle and last thirds (in "
            "intended-send order) over the time between their ends, i.e. the rate due slowed by the growth of their "
            f"latency from the intended send; its range from those medians' {uncertainty.LEVEL:.0%} intervals: the "
            "last third above the middle beyond both is short of the offered rate beyond the noise, and the level "
            "broke; over each cell's steady window: ")


def slo_text(slo: Mapping[str, Any]) -> str:
    """The search's criteria in words: "TTFT p90 <= 0.1 s; 90% decode >= 20 t/s; goodput >= 95%"."""
    parts = []
    if slo.get("ttft_p") is not None:
        parts.append(f"TTFT p{slo['ttft_p']:g} <= {slo['ttft_s']:g} s")
    if slo.get("decode_p") is not None:
        parts.append(f"{slo['decode_p']:g}% of requests decode >= {slo['decode_tps']:g} t/s")
    if slo.get("goodput") is not None:
        targets = " and ".join(t for t in (f"TTFT <= {slo['ttft_s']:g} s" if slo.get("ttft_s") else "",
                                           f"decode >= {slo['decode_tps']:g} t/s" if slo.get("decode_tps") else "")
                               if t)
        parts.append(f"{slo['goodput']:.0%} of requests meet {targets}")
    return "; ".join(parts)


def _unit(variable: str) -> Callable[[float], str]:
    """A level's value in words: "2 users", "12 sessions", "12 req/s"."""
    return lambda v: search.level_text(variable, v)


def _level(value: float, row: Mapping[str, Any] | None, variable: str) -> str:
    """"2 users, 1.36 req/s delivered (SLO met in 97% of resamples)" (sessions alike); a rate: "32 req/s:
    delivered 24.10 req/s of 32 offered (22.51–25.43; short of it: ...), SLO met in 0% of resamples"."""
    row = row or {}
    share = text.percent(row.get("pass_share_blocks"))
    if variable != "rate":
        return f"{_unit(variable)(value)}, {text.num(row.get('delivered_rps'), 2)} req/s delivered (SLO met in " \
               f"{share} of resamples)"
    if pd.isna(row.get("delivered_high_rps", math.nan)):
        return f"{value:g} req/s: too few requests to judge the rate delivered, SLO met in {share} of resamples"
    delivered = capacity.delivery_text(row["delivered_rps"], row["delivered_low_rps"], row["delivered_high_rps"], value,
                                       row["arrived_rps"], bool(row["short"]), row["latency_middle_s"],
                                       row["latency_last_s"])
    return f"{value:g} req/s: {delivered}, SLO met in {share} of resamples"


def _little_text(levels: list[tuple[float, Mapping[str, Any] | None]], variable: str) -> str:
    """Little's law at the bracket's levels: "Little's law: ok at 2 users and 3 users", or what
    disagreed, in words (none for sessions, whose think time keeps no stream busy)."""
    unit, users = _unit(variable), variable == "users"
    known = [(value, row) for value, row in levels if row and not pd.isna(row.get("little_gap"))]
    if not known:
        return ""
    agree = [unit(value) for value, row in known if row["little_holds"]]
    parts = [f"ok at {' and '.join(agree)}"] if agree else []
    for value, row in known:
        if not row["little_holds"]:
            parts.append(f"at {unit(value)} {_little_disagreement(row, users)}")
    return "Little's law: " + "; ".join(parts)


def _little_disagreement(row: Mapping[str, Any], users: bool) -> str:
    """How Little's law failed at a level, and what that says."""
    gap, expected = row["little_gap"], text.num(row["little_expected_in_flight"], 2)
    rate, latency = text.num(row["little_rate_rps"], 2), text.num(row["latency_s"], 3)
    if users:
        why = ("the streams sat idle between requests: the client may have set the pace" if gap < 0
               else "the window was short beside the latency")
        return (f"{rate} req/s x {latency} s = {expected} in flight, {abs(gap):.0%} {'fewer' if gap < 0 else 'more'} "
                f"than its {text.num(row['little_in_flight'], 0)} users ({why})")
    why = ("the requests ended more slowly than they were offered: a queue building up at the server, or too few "
           "free users (-u) to send them" if gap > 0 else "latency fell within the level")
    return (f"{rate} req/s offered x {latency} s = {expected} in flight, {abs(gap):.0%} "
            f"{'more' if gap > 0 else 'fewer'} than the {text.num(row['little_in_flight'], 2)} measured ({why})")


def _little_cell(gap: Any, holds: Any) -> str:
    """"ok", or how far in flight is from req/s x latency: "-15%"."""
    if gap is None or pd.isna(gap):
        return text.MISSING
    return "ok" if holds else f"{gap * 100:+.0f}%"


def _ranged(values: pd.Series, lows: pd.Series, highs: pd.Series, digits: int) -> list[str]:
    """A figure with its range: "0.062 (0.030–0.097)"."""
    return [text.MISSING if pd.isna(v) else f"{text.num(v, digits)} ({text.num(lo, digits)}–{text.num(hi, digits)})"
            for v, lo, hi in zip(values, lows, highs)]
