"""A sweep's table from synthetic records whose answers are known: one row per configuration in
the sweep's order, each configuration's figures from its own records (`target` = its label), a
configuration that did not serve a row with its status and log tail, capacity from its search,
the server's accept length pooled over cells by steps, and the verdicts against the first."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from loadlib.figures.energy import pooled
from loadlib.figures.sweep import pooled_accept_length, sweep_rows, sweep_table
from loadlib.record_table import records_frame
from loadlib.report.contents import sweep_of
from loadlib.run_view import RunView
from tests.analysis.builders import build_record

T0 = 1_700_000_000.0


def closed(target: str, ttft: float, decode: float, chunks: int, per_stream: int = 10, streams: int = 2,
           cell: str = "closed", sd: float = 0.0, seed: int = 0) -> list[dict]:
    """A closed loop of `streams` users sending back to back: each request 101 tokens, TTFT `ttft`,
    decoding at `decode` t/s ((101 - 1) / decode s after the first token), times spread by `sd`."""
    rng = np.random.default_rng(seed)
    records = []
    for slot in range(streams):
        sent = T0 + 0.01 * slot
        for _ in range(per_stream):
            first = ttft * (1 + sd * rng.standard_normal())
            total = first + 100 / (decode * (1 + sd * rng.standard_normal()))
            records.append(build_record(cell, sent_at=sent, ttft_s=first, total_s=total, comp=101, chunks=chunks,
                                        slot=slot, concurrency=streams, case="closed", target=target))
            sent += total
    return records


def entry(label: str, status: str = "ok", **config) -> dict:
    return {"label": label, "config": config, "status": status, "log_tail": [f"{label} log"], "host": "", "pid": 1}


def configs(df, entries: list[dict]):
    """The configurations as the sweep's report reads them: the records split by server once."""
    return RunView(df, {"sweep": entries}).configs


def test_each_configuration_gets_its_own_figures_in_the_sweeps_order():
    df = records_frame(closed("draft=8", ttft=0.25, decode=200, chunks=20) + closed("draft=4", ttft=0.5, decode=100,
                                                                                      chunks=25))
    runs = configs(df, [entry("draft=4", draft=4), entry("draft=8", draft=8),
                        {**entry("draft=16", "exited", draft=16), "log_tail": ["error: bad block size"]}])
    table = sweep_table(runs).set_index("label")
    assert list(table.index) == ["draft=4", "draft=8", "draft=16"]
    four, eight, sixteen = (table.loc[label] for label in table.index)
    assert (four["status"], four["config"], four["n"], four["failed"]) == ("ok", {"draft": 4}, 20, 0)
    assert four["decode_p50_tps"] == pytest.approx(100) and eight["decode_p50_tps"] == pytest.approx(200)
    assert four["ttft_p50_s"] == pytest.approx(0.5) and eight["ttft_p50_s"] == pytest.approx(0.25)
    assert four["tok_per_chunk"] == pytest.approx(101 / 25) and eight["tok_per_chunk"] == pytest.approx(101 / 20)
    assert four["slo_met"] == 1.0  # TTFT <= 2 s and decode >= 20 t/s, every request
    # two streams, each decoding 100 tokens in every 1.5 s: about 133 t/s in the steady window
    assert four["steady_decode_tps"] == pytest.approx(2 * 100 / 1.5, rel=0.05)
    assert four["decode_p50_ci_low"] <= 100 <= four["decode_p50_ci_high"]
    assert (sixteen["status"], sixteen["n"], sixteen["log_tail"]) == ("exited", 0, ["error: bad block size"])
    assert math.isnan(sixteen["decode_p50_tps"]) and math.isnan(sixteen["ttft_p50_s"])
    assert math.isnan(four["capacity"]) and math.isnan(four["accept_length"])  # no search, no scrapes


def test_a_label_with_records_but_no_entry_is_a_row_after_the_listed_ones():
    df = records_frame(closed("a", 0.5, 100, 25) + closed("b", 0.5, 100, 25))
    assert [run.label for run in configs(df, [entry("b")])] == ["b", "a"]


def test_capacity_is_the_searchs_best_level_with_the_req_per_s_delivered_there():
    records = closed("mrr=2", 0.5, 100, 25, cell="search-u1", streams=1) + \
        closed("mrr=2", 0.5, 100, 25, cell="search-u2")
    search = {"variable": "users", "best": 2, "levels": [{"value": 1, "cells": ["search-u1"]},
                                                        {"value": 2, "cells": ["search-u2"]}]}
    runs = configs(records_frame(records), [{**entry("mrr=2", mrr=2), "search": search}])
    row = sweep_table(runs).iloc[0]
    assert (row["capacity"], row["capacity_variable"]) == (2.0, "users")
    assert row["capacity_rps"] == pytest.approx(2 / 1.5, rel=0.15)  # two streams, one request each 1.5 s


def test_the_servers_accept_length_pools_cells_by_their_verify_steps():
    cell = lambda tokens, accept: SimpleNamespace(generated_tokens=tokens, accept_length=accept)
    # 1000 tokens at 4 a step (250 steps) and 1000 at 2 (500 steps): 2000 / 750, not the mean 3
    assert pooled_accept_length([cell(1000, 4.0), cell(1000, 2.0)]) == pytest.approx(2000 / 750)
    assert math.isnan(pooled_accept_length([cell(1000, None), cell(None, 3.0)]))


def test_the_json_rows_lead_with_config_label_and_status_and_hold_no_nan():
    df = records_frame(closed("draft=4", 0.5, 100, 25))
    runs = configs(df, [entry("draft=4", draft=4), entry("draft=8", "unhealthy", draft=8)])
    found = sweep_rows(sweep_table(runs))
    assert [list(row)[:3] for row in found] == [["config", "label", "status"]] * 2
    assert found[0]["config"] == {"draft": 4} and found[0]["decode_p50_tps"] == pytest.approx(100)
    assert found[1]["status"] == "unhealthy" and found[1]["decode_p50_tps"] is None
    assert found[1]["log_tail"] == ["draft=8 log"]


def test_verdicts_judge_each_configuration_that_served_against_the_first():
    records = (closed("mrr=2", 0.5, 100, 25, per_stream=30, sd=0.03, seed=1)
               + closed("mrr=4", 1.0, 100, 25, per_stream=30, sd=0.03, seed=2)
               + closed("mrr=2-again", 0.5, 100, 25, per_stream=30, sd=0.03, seed=3))
    manifest = {"sweep": [entry("mrr=2"), entry("mrr=3", "died"), entry("mrr=4"), entry("mrr=2-again")]}
    sections, found = sweep_of(RunView(records_frame(records), manifest))
    assert [section.key for section in sections] == ["sweep", "sweep_logs", "verdicts"]
    verdicts = {(row["run_b"], row["figure"]): row for row in found["verdicts"]}
    assert {row["run_a"] for row in found["verdicts"]} == {"mrr=2"}
    assert "mrr=3" not in {row["run_b"] for row in found["verdicts"]}  # it did not serve
    assert verdicts[("mrr=4", "closed TTFT p50 s")]["verdict"] == "higher"
    assert verdicts[("mrr=4", "closed TTFT p50 s")]["diff_pct"] == pytest.approx(100, abs=10)
    assert verdicts[("mrr=2-again", "closed TTFT p50 s")]["verdict"] == "not distinguishable"
    assert [row["label"] for row in found["sweep"]] == ["mrr=2", "mrr=3", "mrr=4", "mrr=2-again"]


def test_a_sweep_over_draft_tokens_reads_each_configurations_acceptance_by_draft_length_and_energy():
    # draft=4: 10 steps a request, 4 accepted none, 2 one, 1 two, 3 three: p = 0.6, 0.4, 0.3 -> 1.6, 2.0, 2.3
    # draft=2: 10 steps, 5 none, 5 one: p = 0.5 -> 1.5
    records = [{**record, "spec_verify_steps": steps, "spec_accepted_tokens": accepted, "spec_draft_tokens": drafts,
                "spec_accept_histogram": histogram}
               for label, steps, accepted, drafts, histogram in (("draft=4", 10, 13, 30, "4,2,1,3"),
                                                                 ("draft=2", 10, 5, 10, "5,5"))
               for record in closed(label, 0.5, 100, 25)]
    view = RunView(records_frame(records), {"sweep": [entry("draft=4", draft=4), entry("draft=2", draft=2)]})
    table = sweep_table(view.configs).set_index("label")
    assert table.loc["draft=4", "expected_tokens"] == pytest.approx([1.6, 2.0, 2.3])
    assert table.loc["draft=2", "expected_tokens"] == pytest.approx([1.5])
    assert math.isnan(table.loc["draft=4", "tokens_per_joule"])  # no GPU meter
    sections, _found = sweep_of(view)
    shown = sections[0].view.set_index("configuration")
    assert shown.loc["draft=4", "expected tokens/step at draft 1..N"] == "1.60 2.00 2.30"
    assert "an estimate of acceptance at a shorter draft, not of speed" in sections[0].title


def test_energy_pools_every_gpu_together_over_the_cells():
    table = pd.DataFrame({"gpu": ["0", "1", "all", "0", "1", "all"], "joules": [300.0, 100.0, 400.0, 30.0, 10.0, None],
                          "completion_tokens": [1000.0] * 3 + [50.0] * 3})
    # the second cell's sum is unknown (a GPU's counter did not move): 1000 tokens over 400 J
    assert pooled(table) == {"tokens_per_joule": 2.5, "joules_per_token": 0.4}
    one = pd.DataFrame({"gpu": ["0", "0"], "joules": [300.0, 100.0], "completion_tokens": [600.0, 200.0]})
    assert pooled(one) == {"tokens_per_joule": 2.0, "joules_per_token": 0.5}
    assert all(math.isnan(v) for v in pooled(one.iloc[:0]).values())
