"""Reasoning: the time to the first answer token after the reasoning (TTFO) and the reasoning
token count, from the stream to the record, the tables and a real run with thinking on."""

from __future__ import annotations

import orjson
import pytest

from loadlib.figures import free_running, protocol_tables
from loadlib.record_table import FLOAT_COLUMNS, RECORD_COLUMNS, read_records_frame, records_frame
from loadlib.records import RequestRecord, read_records
from loadlib.wire.sse import parse_stream
from tests.analysis.builders import build_record
from tests.conftest import FAST_SIM, run_locust
from tests.wire.test_sse import USAGE, sglang_chunk, sse


def _usage(**extra) -> dict:
    return {**USAGE, "usage": {**USAGE["usage"], **extra}}


# --- the stream ---------------------------------------------------------------------------------

def test_first_answer_is_the_first_content_chunk_after_the_reasoning():
    pieces = sse(sglang_chunk(content="", role="assistant"), sglang_chunk(reasoning="Let me"),
                 sglang_chunk(reasoning=" think"), sglang_chunk(content="Answer"), sglang_chunk(content="!"),
                 USAGE, "[DONE]")
    s = parse_stream(pieces, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    assert (s.first_token_at, s.first_answer_at, s.chunks_before_answer) == (2.0, 4.0, 2)


def test_without_reasoning_the_first_answer_is_the_first_token():
    s = parse_stream(sse(sglang_chunk(content="def"), sglang_chunk(content=" f"), USAGE, "[DONE]"),
                     [1.0, 2.0, 3.0, 4.0])
    assert (s.first_token_at, s.first_answer_at, s.chunks_before_answer) == (1.0, 1.0, 0)


def test_reasoning_that_never_ends_has_no_answer():
    s = parse_stream(sse(sglang_chunk(reasoning="hmm"), sglang_chunk(reasoning="..."), USAGE, "[DONE]"),
                     [1.0, 2.0, 3.0, 4.0])
    assert s.first_token_at == 1.0 and s.first_answer_at is None and s.chunks_before_answer is None


def test_reasoning_and_answer_in_one_read_share_its_time_but_count_apart():
    s = parse_stream([b"".join(sse(sglang_chunk(reasoning="so"), sglang_chunk(content="yes"))),
                      b"".join(sse(USAGE, "[DONE]"))], [1.0, 2.0])
    assert (s.first_token_at, s.first_answer_at, s.chunks_before_answer) == (1.0, 1.0, 1)


def test_vllm_reasoning_field_then_content():
    think = {"id": "c", "choices": [{"index": 0, "delta": {"reasoning": "hmm"}}]}
    answer = {"id": "c", "choices": [{"index": 0, "delta": {"content": "done"}, "finish_reason": "stop"}]}
    s = parse_stream(sse(think, answer, USAGE, "[DONE]"), [1.0, 2.0, 3.0, 4.0])
    assert (s.first_token_at, s.first_answer_at) == (1.0, 2.0)


def test_a_tool_call_after_reasoning_is_the_answer():
    call = {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]}
    s = parse_stream(sse(sglang_chunk(reasoning="I need the weather"), call, USAGE, "[DONE]"), [1.0, 2.0, 3.0, 4.0])
    assert (s.first_answer_at, s.chunks_before_answer) == (2.0, 1)


def test_reasoning_tokens_come_from_completion_tokens_details_else_sglangs_usage_key():
    def tokens(usage: dict) -> int | None:
        return parse_stream(sse(sglang_chunk(content="x"), usage, "[DONE]"), [1.0, 2.0, 3.0]).reasoning_tokens

    assert tokens(_usage(completion_tokens_details={"reasoning_tokens": 7})) == 7  # OpenAI, vLLM
    assert tokens(_usage(reasoning_tokens=5)) == 5  # SGLang
    assert tokens(_usage(completion_tokens_details={"reasoning_tokens": 7}, reasoning_tokens=5)) == 7
    assert tokens(_usage(completion_tokens_details=None)) is None
    assert tokens(_usage(reasoning_tokens="many")) is None


# --- records and tables -------------------------------------------------------------------------

def test_records_without_the_new_fields_still_load(tmp_path):
    old = build_record("closed", case="closed")  # a journal line from before TTFO
    assert "ttfo_s" not in old and RequestRecord.from_dict(old).ttfo_s is None
    (tmp_path / "records.jsonl").write_bytes(orjson.dumps(old) + b"\n")
    frame = read_records_frame(tmp_path)
    assert frame["ttfo_s"].isna().all() and frame["reasoning_tokens"].isna().all()
    assert {"ttfo_s", "reasoning_tokens"} <= set(FLOAT_COLUMNS) & set(RECORD_COLUMNS)


def test_ttfo_percentiles_sit_beside_ttft_only_where_a_record_has_one():
    plain = records_frame([build_record("single"), build_record("single", round=1)])
    assert list(protocol_tables.ttft_percentiles(plain).columns) == ["p50", "p90", "p99", "n"]
    thinking = records_frame([build_record("single", ttfo_s=0.5, reasoning_tokens=40),
                                      build_record("single", round=1, ttfo_s=0.7, reasoning_tokens=60),
                                      build_record("c2-same")])
    table = protocol_tables.ttft_percentiles(thinking)
    assert table.loc["single", "ttfo_p50"] == pytest.approx(0.6) and table.loc["single", "ttfo_n"] == 2
    assert table.loc["c2-same", "ttfo_n"] == 0
    assert protocol_tables.single_stream_table(thinking).loc["code", "ttfo_s"] == pytest.approx(0.6)


def test_steady_percentiles_show_ttfo_and_reasoning_tokens_when_some_request_reasoned():
    def closed(i: int, **fields) -> dict:
        return build_record("closed", case="closed", sent_at=1_700_000_000.0 + i, **fields)

    plain = free_running.steady_percentiles(records_frame([closed(i, reasoning_tokens=0) for i in range(4)]))
    assert "ttfo_s" not in set(plain["figure"]) and "reasoning_tokens" not in set(plain["figure"])
    thinking = free_running.steady_percentiles(records_frame(
        [closed(i, ttfo_s=0.5 + i / 10, reasoning_tokens=100 * i) for i in range(4)]))
    assert {"ttfo_s", "reasoning_tokens"} <= set(thinking["figure"])


# --- a real run ---------------------------------------------------------------------------------

@pytest.mark.processes
@pytest.mark.parametrize("flavor", ["sglang", "vllm"])
def test_a_thinking_run_records_ttfo_after_ttft_and_reasoning_tokens(tmp_path, flavor):
    run_dir = tmp_path / "run"
    result = run_locust(["--headless", "-u", "2", "--rounds", "1", "--concurrency", "2", "--scenarios", "code",
                         "--thinking", "on", "--max-tokens", "2048", "--run-dir", str(run_dir),
                         "--sim-args", f"{FAST_SIM} --flavor {flavor}", "--loglevel", "WARNING"],
                        cwd=tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    records = list(read_records(run_dir))
    assert len(records) == 5 and all(r["error"] is None for r in records)
    for record in records:  # the simulator reasons 640-1280 tokens, then answers
        assert record["ttfo_s"] > record["ttft_s"] > 0
        assert 0 < record["reasoning_tokens"] < record["completion_tokens"]
    summary = (run_dir / "summary.txt").read_text()
    assert "TTFO = time to the first answer token after the reasoning" in summary
    assert "TTFO p50" in summary and "TTFO s" in summary
    assert summary in result.stdout + result.stderr


@pytest.mark.processes
def test_a_run_without_thinking_has_no_ttfo(tmp_path):
    run_dir = tmp_path / "run"
    result = run_locust(["--headless", "-u", "1", "--rounds", "1", "--concurrency", "1", "--scenarios", "code",
                         "--thinking", "off", "--max-tokens", "64", "--run-dir", str(run_dir),
                         "--sim-args", FAST_SIM, "--loglevel", "WARNING"], cwd=tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    records = list(read_records(run_dir))
    assert records and all(r["ttfo_s"] is None and r["reasoning_tokens"] == 0 for r in records)
    assert "TTFO" not in (run_dir / "summary.txt").read_text()
