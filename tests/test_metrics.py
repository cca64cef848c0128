"""The protocol's formulas (PROTOCOL.md), checked on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from loadlib import metrics

T0 = 1_700_000_000.0


def rec(cell="single", scenario="code", round=0, slot=0, ttft_s=0.1, total_s=1.1, comp=101,
        chunks=25, error=None, sent_at=T0, prompt_tokens=40, cached_tokens=0):
    concurrency, case = (1, "single") if cell == "single" else (int(cell[1:cell.index("-")]), cell.split("-")[1])
    return {"request_id": f"{cell}-{scenario}-{round}-{slot}", "scenario": scenario, "cell": cell,
            "concurrency": concurrency, "case": case, "round": round, "slot": slot, "worker": 0,
            "user": slot, "sent_at": sent_at, "ttft_s": ttft_s, "total_s": total_s,
            "last_chunk_s": total_s, "completion_tokens": comp, "prompt_tokens": prompt_tokens,
            "cached_tokens": cached_tokens, "chunks": chunks, "finish_reason": "length",
            "http_status": 200, "error": error, "output_sha": "x", "max_tokens": 512, "thinking": False}


def test_decode_excludes_the_first_token_and_the_time_before_it():
    assert metrics.decode_tps(513, 0.5, 2.5) == pytest.approx(256.0)


def test_tok_per_chunk_is_completion_tokens_over_non_empty_chunks():
    assert metrics.tok_per_chunk(512, 80) == pytest.approx(6.4)


def test_end_to_end_includes_prefill():
    assert metrics.end_to_end_tps(512, 2.0) == pytest.approx(256.0)


def test_prefill_is_prompt_tokens_over_ttft():
    assert metrics.prefill_tps(3228, 1.97) == pytest.approx(1638.58, abs=0.01)


def test_forward_rate_is_decode_over_tok_per_chunk():
    assert metrics.forward_rate(207.0, 6.69) == pytest.approx(30.94, abs=0.01)


def test_records_frame_leaves_failed_requests_out_of_every_figure():
    df = metrics.records_frame([rec(), rec(comp=None, error="no_usage")])
    assert df["ok"].tolist() == [True, False]
    assert df.loc[0, "decode_tps"] == pytest.approx(100.0)
    assert df.loc[0, "tok_per_chunk"] == pytest.approx(4.04)
    assert df.loc[0, "e2e_tps"] == pytest.approx(101 / 1.1)
    assert df.loc[0, "prefill_tps"] == pytest.approx(400.0)
    assert df.loc[1, ["decode_tps", "tok_per_chunk", "e2e_tps", "prefill_tps"]].isna().all()


def test_single_stream_table_gives_mean_range_and_n_over_successful_rounds():
    df = metrics.records_frame([
        rec(round=0, ttft_s=0.1, total_s=2.1, comp=401, chunks=100),  # 200 t/s
        rec(round=1, ttft_s=0.2, total_s=1.8, comp=401, chunks=100),  # 250 t/s
        rec(round=2, ttft_s=0.3, total_s=2.8, comp=401, chunks=100),  # 160 t/s
        rec(round=3, comp=1, error="completion_tokens<=1"),
    ])
    code = metrics.single_stream_table(df).loc["code"]
    assert code["decode_tps"] == pytest.approx(610 / 3)
    assert (code["decode_min"], code["decode_max"]) == pytest.approx((160.0, 250.0))
    assert code["ttft_s"] == pytest.approx(0.2)
    assert code["tok_per_chunk"] == pytest.approx(4.01)
    assert code["n"] == 3
    assert code["forward_rate"] == pytest.approx(610 / 3 / 4.01)


def test_aggregate_is_all_decode_tokens_over_the_longest_decode_time():
    df = metrics.records_frame([
        rec("c2-same", slot=0, ttft_s=0.1, total_s=2.1, comp=201),  # 200 tokens in 2.0 s
        rec("c2-same", slot=1, ttft_s=0.2, total_s=1.2, comp=201),  # 200 tokens in 1.0 s
    ])
    rounds = metrics.round_aggregates(df)
    assert rounds["aggregate_tps"].tolist() == pytest.approx([400 / 2.0])


def test_aggregate_ignores_staggered_starts_as_the_protocol_does():
    """Stream 1 starts 1.5 s late: the streams overlap for only 0.5 s, yet the formula sees 2.0 s."""
    df = metrics.records_frame([
        rec("c2-different", slot=0, sent_at=T0, ttft_s=0.0, total_s=2.0, comp=201),
        rec("c2-different", slot=1, sent_at=T0 + 1.5, ttft_s=0.0, total_s=2.0, comp=201),
    ])
    assert metrics.round_aggregates(df)["aggregate_tps"].tolist() == pytest.approx([200.0])


def test_a_round_with_a_failed_stream_does_not_count():
    df = metrics.records_frame([
        rec("c2-same", round=0, slot=0), rec("c2-same", round=0, slot=1, error="http_500", comp=None),
        rec("c2-same", round=1, slot=0, total_s=1.1), rec("c2-same", round=1, slot=1, total_s=2.1),
    ])
    rounds = metrics.round_aggregates(df)
    assert rounds["complete"].tolist() == [False, True]
    table = metrics.concurrency_table(df)
    assert table.loc[0, ["aggregate_tps", "min", "max", "n"]].tolist() == pytest.approx([100.0, 100.0, 100.0, 1])


def test_concurrency_table_overlap_is_aggregate_over_single_stream_code_decode():
    df = metrics.records_frame([
        rec(ttft_s=0.1, total_s=1.1, comp=101),  # single code: 100 t/s
        rec("c2-same", round=0, slot=0, total_s=1.1), rec("c2-same", round=0, slot=1, total_s=1.1),  # 200
        rec("c2-same", round=1, slot=0, total_s=0.6), rec("c2-same", round=1, slot=1, total_s=0.6),  # 400
        rec("c2-different", slot=0, total_s=1.1), rec("c2-different", slot=1, total_s=2.1),  # 200/2.0 = 100
    ])
    table = metrics.concurrency_table(df)
    assert table["case"].tolist() == ["same", "different"]
    assert table["aggregate_tps"].tolist() == pytest.approx([300.0, 100.0])
    assert table["overlap"].tolist() == pytest.approx([3.0, 1.0])
    assert table["min"].tolist() == pytest.approx([200.0, 100.0])
    assert table["max"].tolist() == pytest.approx([400.0, 100.0])


def test_concurrency_table_without_a_single_stream_run_has_no_overlap():
    df = metrics.records_frame([rec("c2-same", slot=0), rec("c2-same", slot=1)])
    assert math.isnan(metrics.concurrency_table(df).loc[0, "overlap"])


def test_ttft_percentiles_interpolate_raw_records():
    df = metrics.records_frame([rec(round=i, ttft_s=t) for i, t in enumerate([0.1, 0.2, 0.3, 0.5, 0.7])])
    row = metrics.ttft_percentiles(df).loc["single"]
    assert row[["p50", "p90", "p99"]].tolist() == pytest.approx([0.3, 0.62, 0.692])
    assert row["n"] == 5


def test_failures_are_counted_by_cell_and_reason():
    df = metrics.records_frame([rec(error="no_usage", comp=None), rec(error="no_usage", comp=None),
                                rec("c2-same", error="http_500", comp=None), rec()])
    table = metrics.failures_table(df)
    assert table.to_dict("records") == [{"cell": "single", "error": "no_usage", "count": 2},
                                        {"cell": "c2-same", "error": "http_500", "count": 1}]
