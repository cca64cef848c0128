"""The protocol's formulas (PROTOCOL.md), checked on hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadlib.figures import formulas, free_running, protocol_tables
from loadlib.record_table import records_frame
from tests.analysis.builders import free_running_records

T0 = 1_700_000_000.0


def rec(cell="single", scenario="code", round=0, slot=0, ttft_s=0.1, total_s=1.1, comp=101,
        chunks=25, error=None, sent_at=T0, prompt_tokens=40, cached_tokens=0, case=None, **fields):
    concurrency = int(cell[1:cell.index("-")]) if cell[:1] == "c" and cell[1:2].isdigit() else 1
    case = case or ("single" if cell == "single" else cell.split("-")[1])
    return {"request_id": f"{cell}-{scenario}-{round}-{slot}", "scenario": scenario, "cell": cell,
            "concurrency": concurrency, "case": case, "round": round, "slot": slot, "worker": 0,
            "user": slot, "sent_at": sent_at, "ttft_s": ttft_s, "total_s": total_s,
            "last_chunk_s": total_s, "completion_tokens": comp, "prompt_tokens": prompt_tokens,
            "cached_tokens": cached_tokens, "chunks": chunks, "finish_reason": "length",
            "http_status": 200, "error": error, "output_sha": "x", "max_tokens": 512, "thinking": False,
            **fields}


def test_decode_excludes_the_first_token_and_the_time_before_it():
    assert formulas.decode_tps(513, 0.5, 2.5) == pytest.approx(256.0)


def test_tok_per_chunk_is_completion_tokens_over_non_empty_chunks():
    assert formulas.tok_per_chunk(512, 80) == pytest.approx(6.4)


def test_end_to_end_includes_prefill():
    assert formulas.end_to_end_tps(512, 2.0) == pytest.approx(256.0)


def test_prefill_is_prompt_tokens_over_ttft():
    assert formulas.prefill_tps(3228, 1.97) == pytest.approx(1638.58, abs=0.01)


def test_forward_rate_is_decode_over_tok_per_chunk():
    assert formulas.forward_rate(207.0, 6.69) == pytest.approx(30.94, abs=0.01)


def test_records_frame_leaves_failed_requests_out_of_every_figure():
    df = records_frame([rec(), rec(comp=None, error="no_usage")])
    assert df["ok"].tolist() == [True, False]
    assert df.loc[0, "decode_tps"] == pytest.approx(100.0)
    assert df.loc[0, "tok_per_chunk"] == pytest.approx(4.04)
    assert df.loc[0, "e2e_tps"] == pytest.approx(101 / 1.1)
    assert df.loc[0, "prefill_tps"] == pytest.approx(400.0)
    assert df.loc[1, ["decode_tps", "tok_per_chunk", "e2e_tps", "prefill_tps"]].isna().all()


def test_single_stream_table_gives_mean_range_and_n_over_successful_rounds():
    df = records_frame([
        rec(round=0, ttft_s=0.1, total_s=2.1, comp=401, chunks=100),  # 200 t/s
        rec(round=1, ttft_s=0.2, total_s=1.8, comp=401, chunks=100),  # 250 t/s
        rec(round=2, ttft_s=0.3, total_s=2.8, comp=401, chunks=100),  # 160 t/s
        rec(round=3, comp=1, error="completion_tokens<=1"),
    ])
    code = protocol_tables.single_stream_table(df).loc["code"]
    assert code["decode_tps"] == pytest.approx(610 / 3)
    assert (code["decode_min"], code["decode_max"]) == pytest.approx((160.0, 250.0))
    assert code["ttft_s"] == pytest.approx(0.2)
    assert code["tok_per_chunk"] == pytest.approx(4.01)
    assert code["n"] == 3
    assert code["forward_rate"] == pytest.approx(610 / 3 / 4.01)


def test_aggregate_is_all_decode_tokens_over_the_longest_decode_time():
    df = records_frame([
        rec("c2-same", slot=0, ttft_s=0.1, total_s=2.1, comp=201),  # 200 tokens in 2.0 s
        rec("c2-same", slot=1, ttft_s=0.2, total_s=1.2, comp=201),  # 200 tokens in 1.0 s
    ])
    rounds = protocol_tables.round_aggregates(df)
    assert rounds["aggregate_tps"].tolist() == pytest.approx([400 / 2.0])


def test_aggregate_ignores_staggered_starts_as_the_protocol_does():
    """Stream 1 starts 1.5 s late: the streams overlap for only 0.5 s, yet the formula sees 2.0 s."""
    df = records_frame([
        rec("c2-different", slot=0, sent_at=T0, ttft_s=0.0, total_s=2.0, comp=201),
        rec("c2-different", slot=1, sent_at=T0 + 1.5, ttft_s=0.0, total_s=2.0, comp=201),
    ])
    assert protocol_tables.round_aggregates(df)["aggregate_tps"].tolist() == pytest.approx([200.0])


def test_a_round_with_a_failed_stream_does_not_count():
    df = records_frame([
        rec("c2-same", round=0, slot=0), rec("c2-same", round=0, slot=1, error="http_500", comp=None),
        rec("c2-same", round=1, slot=0, total_s=1.1), rec("c2-same", round=1, slot=1, total_s=2.1),
    ])
    rounds = protocol_tables.round_aggregates(df)
    assert rounds["complete"].tolist() == [False, True]
    table = protocol_tables.concurrency_table(df)
    assert table.loc[0, ["aggregate_tps", "min", "max", "n"]].tolist() == pytest.approx([100.0, 100.0, 100.0, 1])


def test_concurrency_table_gives_both_overlaps_each_named_for_what_it_divides_by():
    df = records_frame([
        rec(ttft_s=0.1, total_s=1.1, comp=101),  # single code: 100 t/s
        rec("c2-same", round=0, slot=0, total_s=1.1), rec("c2-same", round=0, slot=1, total_s=1.1),  # 200
        rec("c2-same", round=1, slot=0, total_s=0.6), rec("c2-same", round=1, slot=1, total_s=0.6),  # 400
        rec("c2-different", slot=0, total_s=1.1), rec("c2-different", slot=1, total_s=2.1),  # 200/2.0 = 100
    ])
    table = protocol_tables.concurrency_table(df)
    assert table["case"].tolist() == ["same", "different"]
    assert table["aggregate_tps"].tolist() == pytest.approx([300.0, 100.0])
    # the thread's: aggregate / mean per-stream decode of the same rounds (100 and 200 -> 150; 100 and 50 -> 75)
    assert table["overlap_vs_stream_decode"].tolist() == pytest.approx([2.0, 100 / 75])
    # a different figure: aggregate / the single-stream code decode (100)
    assert table["overlap_vs_single_decode"].tolist() == pytest.approx([3.0, 1.0])
    assert table["min"].tolist() == pytest.approx([200.0, 100.0])
    assert table["max"].tolist() == pytest.approx([400.0, 100.0])


def test_two_cells_of_one_n_and_case_stay_apart_in_the_concurrency_table():
    """A profile's c2-distinct-issues (case "different") beside the protocol's c2-different."""
    df = records_frame([
        rec(ttft_s=0.1, total_s=1.1, comp=101),  # single code: 100 t/s
        rec("c2-distinct-issues", slot=0, total_s=1.1, case="different"),  # 200 tokens / 1.0 s
        rec("c2-distinct-issues", slot=1, total_s=2.1, case="different"),  # -> 200 / 2.0 = 100
        rec("c2-different", slot=0, total_s=1.1), rec("c2-different", slot=1, total_s=0.6),  # 200 / 1.0 = 200
        rec("c2-same", slot=0, total_s=0.6), rec("c2-same", slot=1, total_s=0.6),  # 200 / 0.5 = 400
    ])
    table = protocol_tables.concurrency_table(df)
    assert table[["cell", "concurrency", "case"]].values.tolist() == [
        ["c2-same", 2, "same"], ["c2-different", 2, "different"], ["c2-distinct-issues", 2, "different"]]
    assert table["aggregate_tps"].tolist() == pytest.approx([400.0, 200.0, 100.0])
    assert table["overlap_vs_single_decode"].tolist() == pytest.approx([4.0, 2.0, 1.0])


def test_concurrency_table_without_a_single_stream_run_has_no_overlap():
    df = records_frame([rec("c2-same", slot=0), rec("c2-same", slot=1)])
    row = protocol_tables.concurrency_table(df).loc[0]
    assert math.isnan(row["overlap_vs_single_decode"]) and row["overlap_vs_stream_decode"] == pytest.approx(2.0)


def test_ttft_percentiles_interpolate_raw_records():
    df = records_frame([rec(round=i, ttft_s=t) for i, t in enumerate([0.1, 0.2, 0.3, 0.5, 0.7])])
    row = protocol_tables.ttft_percentiles(df).loc["single"]
    assert row[["p50", "p90", "p99"]].tolist() == pytest.approx([0.3, 0.62, 0.692])
    assert row["n"] == 5


def test_failures_are_counted_by_cell_and_reason():
    df = records_frame([rec(error="no_usage", comp=None), rec(error="no_usage", comp=None),
                                rec("c2-same", error="http_500", comp=None), rec()])
    table = protocol_tables.failures_table(df)
    assert table.to_dict("records") == [{"cell": "single", "error": "no_usage", "count": 2},
                                        {"cell": "c2-same", "error": "http_500", "count": 1}]


# --- beyond the protocol ------------------------------------------------------------------------

def test_uncached_prefill_counts_only_the_tokens_not_served_from_the_prefix_cache():
    assert formulas.uncached_prefill_tps(1000, 900, 0.05) == pytest.approx(2000.0)


def test_window_aggregate_sees_the_staggered_start_that_the_protocol_ignores():
    """Stream 1 starts 1 s late: tokens flow from 0.5 s to 3.5 s, so the window is 3 s, not 2 s."""
    df = records_frame([
        rec("c2-different", slot=0, sent_at=T0, ttft_s=0.5, total_s=2.5, comp=201),
        rec("c2-different", slot=1, sent_at=T0 + 1.0, ttft_s=0.5, total_s=2.5, comp=201),
    ])
    row = protocol_tables.round_aggregates(df).iloc[0]
    assert row["aggregate_tps"] == pytest.approx(400 / 2.0)
    assert row["window_tps"] == pytest.approx(400 / 3.0)
    assert row["stream_decode_tps"] == pytest.approx(100.0)


def test_window_aggregate_equals_the_protocols_when_streams_start_together():
    df = records_frame([
        rec("c2-same", slot=0, ttft_s=0.5, total_s=2.5, comp=201),
        rec("c2-same", slot=1, ttft_s=0.5, total_s=1.5, comp=101),
    ])
    row = protocol_tables.round_aggregates(df).iloc[0]
    assert row["window_tps"] == pytest.approx(row["aggregate_tps"]) == pytest.approx(300 / 2.0)


def test_concurrency_table_reports_cache_share_and_failed_rounds():
    df = records_frame([
        rec("c2-same", round=0, slot=0, prompt_tokens=1000, cached_tokens=0),
        rec("c2-same", round=0, slot=1, prompt_tokens=1000, cached_tokens=1000),
        rec("c2-same", round=1, slot=0, comp=None, error="no_usage"),
        rec("c2-same", round=1, slot=1),
    ])
    row = protocol_tables.concurrency_table(df).iloc[0]
    assert row["cached_share"] == pytest.approx(0.5)
    assert (row["n"], row["failed_rounds"]) == (1, 1)


def test_prefill_table_separates_cold_hit_and_unknown_cache_states():
    df = records_frame([
        rec(round=0, prompt_tokens=1000, cached_tokens=0, ttft_s=0.5, total_s=1.5),
        rec(round=1, prompt_tokens=1000, cached_tokens=900, ttft_s=0.05, total_s=1.05),
        rec(round=2, prompt_tokens=1000, cached_tokens=900, ttft_s=0.05, total_s=1.05),
        rec(scenario="en_tech", prompt_tokens=500, cached_tokens=None, ttft_s=0.25, total_s=1.25),
        rec("c2-same", slot=0, prompt_tokens=1000),  # concurrent streams stay out
        rec("c2-same", slot=1, prompt_tokens=1000),
    ])
    table = protocol_tables.prefill_table(df)
    assert table[["scenario", "cache", "n"]].values.tolist() == [
        ["en_tech", "unknown", 1], ["code", "cold", 1], ["code", "hit", 2]]
    assert table["prefill_tps"].tolist() == pytest.approx([2000.0, 2000.0, 20000.0])
    assert table["uncached_prefill_tps"].tolist()[1:] == pytest.approx([2000.0, 2000.0])
    assert math.isnan(table["uncached_prefill_tps"].iloc[0])


def test_prefill_table_takes_the_cache_state_the_client_observed():
    """The template's framing (here 20 tokens) is cached for nearly every prompt: the client's
    `cache_observed` says cold; records without it fall back to "any cached token is a hit"."""
    df = records_frame([
        rec(round=0, prompt_tokens=1000, cached_tokens=20, cache_observed="cold", ttft_s=0.5, total_s=1.5),
        rec(round=1, prompt_tokens=1000, cached_tokens=900, cache_observed="warm", ttft_s=0.05, total_s=1.05),
        rec(scenario="en_tech", prompt_tokens=500, cached_tokens=20, ttft_s=0.25, total_s=1.25),
        rec(scenario="cn_chat", prompt_tokens=500, cached_tokens=None, ttft_s=0.25, total_s=1.25),
    ])
    table = protocol_tables.prefill_table(df)
    assert table[["scenario", "cache", "n"]].values.tolist() == [
        ["en_tech", "hit", 1], ["cn_chat", "unknown", 1], ["code", "cold", 1], ["code", "hit", 1]]
    assert table["prefill_tps"].tolist() == pytest.approx([2000.0, 2000.0, 2000.0, 20000.0])  # prompt / TTFT
    assert table["uncached_prefill_tps"].tolist()[2:] == pytest.approx([1960.0, 2000.0])  # (prompt - cached) / TTFT


def test_an_answer_in_one_read_has_no_decode_rate_and_is_counted_as_excluded():
    """A 5-token answer whose first and last chunk came in one read: total = TTFT."""
    df = records_frame([
        rec(round=0, ttft_s=0.1, total_s=1.1, comp=101),  # 100 t/s
        rec(round=1, ttft_s=0.3, total_s=0.3, comp=5),
    ])
    assert math.isnan(df.loc[1, "decode_tps"]) and bool(df.loc[1, "ok"])
    code = protocol_tables.single_stream_table(df).loc["code"]
    assert (code["decode_tps"], code["decode_min"], code["decode_max"]) == pytest.approx((100.0, 100.0, 100.0))
    assert code["ttft_s"] == pytest.approx(0.2)  # its TTFT still counts
    assert protocol_tables.exclusions_table(df).to_dict("records") == [
        {"cell": "single", "reason": protocol_tables.ONE_READ, "count": 1}]


def test_a_round_whose_streams_all_answered_in_one_read_has_no_aggregate():
    df = records_frame([rec("c2-same", slot=s, ttft_s=0.2, total_s=0.2, comp=4) for s in (0, 1)])
    row = protocol_tables.round_aggregates(df).iloc[0]
    assert bool(row["complete"])
    assert math.isnan(row["aggregate_tps"]) and math.isnan(row["window_tps"]) and math.isnan(row["stream_decode_tps"])


def test_an_answer_in_one_read_meets_the_decode_slo_on_its_ttft_alone():
    """One closed-loop stream, back to back: 100 t/s, one read, 100 t/s; all within TTFT 1 s."""
    records = [rec("closed", round=i, sent_at=T0 + start, ttft_s=0.5, total_s=total, comp=51, case="closed")
               for i, (start, total) in enumerate([(0.0, 1.0), (1.0, 0.5), (1.5, 1.0)])]
    table = free_running.steady_state_table(records_frame(records), slo_ttft_s=1.0, slo_decode_tps=20.0)
    assert (table.loc[0, "n"], table.loc[0, "slo_attainment"]) == (3, pytest.approx(1.0))


def test_timeline_bins_streams_in_flight_and_decode_tokens():
    df = records_frame([
        rec(sent_at=T0, ttft_s=1.0, total_s=3.0, comp=201),  # 200 decode tokens over [1, 3]
        rec(round=1, sent_at=T0 + 1.5, ttft_s=None, total_s=1.0, comp=None, error="http_500"),
    ])
    series = free_running.timeline(df, bin_s=1.0)
    assert series["t_s"].tolist() == [0.0, 1.0, 2.0]
    assert series["active_streams"].tolist() == pytest.approx([1.0, 1.5, 1.5])
    assert series["decode_tps"].tolist() == pytest.approx([0.0, 100.0, 100.0])


def test_steady_window_runs_from_first_to_last_moment_at_the_median_level():
    # in flight: 1 stream over [0, 1), 2 over [1, 6), 1 over [6, 7): median level 2
    sent = np.array([0.0, 2.0, 4.0, 1.0, 3.0, 5.0])
    end = np.array([2.0, 4.0, 6.0, 3.0, 5.0, 7.0])
    assert free_running.steady_window(sent, end) == (1.0, 6.0)


def test_steady_state_levels_and_goodput_of_a_free_running_records():
    table = free_running.steady_state_table(records_frame(free_running_records()), slo_ttft_s=1.0,
                                       slo_decode_tps=20.0)
    row = table.set_index("cell").loc["steady"]
    assert (row["window_start_s"], row["window_s"]) == pytest.approx((1.0, 5.2))
    assert row["in_flight"] == pytest.approx(2.0)
    # decode tokens inside [1, 6.2]: 100 + 150 + 150 + 150 + 20 (slow) + 70 = 640
    assert row["decode_tps"] == pytest.approx(640 / 5.2)
    assert row["requests_per_s"] == pytest.approx(5 / 5.2)  # successes ending at 2, 3, 4, 5, 6
    assert row["goodput_rps"] == pytest.approx(4 / 5.2)  # the slow one misses the decode SLO
    assert row["slo_attainment"] == pytest.approx(4 / 6)  # sent at 1..6; the failure is a miss
    assert (row["n"], row["failed"]) == (6, 1)


def test_protocol_cells_have_no_steady_state():
    df = records_frame([rec(), rec("c2-same", slot=0), rec("c2-same", slot=1)])
    assert free_running.steady_state_table(df).empty and free_running.steady_percentiles(df).empty


def test_steady_percentiles_come_from_successful_requests_sent_in_the_window():
    table = free_running.steady_percentiles(records_frame(free_running_records())).set_index("figure")
    assert table.loc["decode_tps", "n"] == 5  # sent at 1, 2, 3, 4, 5
    assert table.loc["decode_tps", "p50"] == pytest.approx(100.0)
    assert table.loc["ttft_s", ["p50", "p99"]].tolist() == pytest.approx([0.5, 0.5])
    assert table.loc["e2e_tps", "p50"] == pytest.approx(75.5)


def test_the_longest_chunk_gap_of_each_request_is_a_steady_percentile_where_the_gaps_were_kept():
    """Each successful request of free_running_records with 24 gaps (--chunk-times), the one sent
    at 3 s with a 350 ms stall among 50 ms gaps, the others evenly 62.5 ms; a run without them has
    no such row."""
    plain = free_running_records()
    kept = [{**record, "chunk_gaps_ms": None if record["error"] else ",".join(
        ["50"] * 23 + ["350"] if record["completion_tokens"] == 21 else ["62.5"] * 24)} for record in plain]
    table = free_running.steady_percentiles(records_frame(kept)).set_index("figure")
    assert table.loc["max_chunk_gap_s", "n"] == 5  # sent at 1, 2, 3, 4, 5
    # numpy's linear p99 of 0.0625 x 4 and 0.35: 0.0625 + 0.96 x (0.35 - 0.0625)
    assert table.loc["max_chunk_gap_s", ["p50", "p99"]].tolist() == pytest.approx([0.0625, 0.0625 + 0.96 * 0.2875])
    assert "max_chunk_gap_s" not in set(free_running.steady_percentiles(records_frame(plain))["figure"])


def test_records_without_some_fields_still_load():
    df = records_frame([{"request_id": "x", "scenario": "code", "cell": "single", "case": "single",
                                 "concurrency": 1, "round": 0, "sent_at": T0, "ttft_s": 0.1, "total_s": 1.1,
                                 "completion_tokens": 101, "chunks": 20}])
    assert df.loc[0, "decode_tps"] == pytest.approx(100.0)
    assert bool(df.loc[0, "ok"])


def test_warm_up_and_priming_requests_enter_no_figure():
    priming = {**rec(ttft_s=5.0, total_s=6.0), "measured": False}
    failed_warm_up = {**rec(error="http_500", comp=None), "measured": False}
    df = records_frame([rec(), priming, failed_warm_up])
    assert len(df) == 1
    assert protocol_tables.single_stream_table(df).loc["code", "ttft_s"] == pytest.approx(0.1)
    assert protocol_tables.failures_table(df).empty


def test_a_round_counts_only_when_all_n_streams_succeeded_at_any_n():
    """The thread's script keeps a 2-stream round with at least 2 successes, i.e. all of them; at N = 4
    a round with 3 successes is dropped (and counted as such), not averaged in as a 4-stream figure."""
    four = [rec("c4-same", round=0, slot=s) for s in range(4)]
    three = [rec("c4-same", round=1, slot=s) for s in range(3)] + [
        rec("c4-same", round=1, slot=3, ttft_s=None, comp=None, error="http_500")]
    row = protocol_tables.concurrency_table(records_frame(four + three)).loc[0]
    assert (row["n"], row["failed_rounds"]) == (1, 1)
    assert row["aggregate_tps"] == pytest.approx(400.0)  # round 0 only: 4 x 100 tokens / 1.0 s
    assert protocol_tables.ROUND_RULE == "a round counts only when all N streams succeeded"
