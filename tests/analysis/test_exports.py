"""`python -m analysis export`: vLLM's result JSON and llm-d's Benchmark Report, each checked
against the fields and types its published source defines, with figures computed by hand, and a
vLLM result read back by `compare`.

The two schemas, as their sources define them (read, not copied; the encodings below are ours):
- `vllm bench serve --save-result --save-detailed`: vllm-project/vllm, vllm/benchmarks/serve.py
  at 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1 (`main_async`'s `result_json`, `benchmark`'s
  `result`, `process_one_metric`'s `{mean,median,std,pN}_{metric}_ms`).
- llm-d Benchmark Report 0.2.1: llm-d/llm-d-benchmark, llmdbenchmark/analysis/benchmark_report/
  schema_v0_2.py, schema_v0_2_1.py, schema_v0_2_components.py and base.py (`Units` and the lists of
  units each field takes) at 8bc9f1ddd873a24f1657d6cca2e0d0fb6947dd36: pydantic models whose
  `extra="forbid"` refuses any field they do not declare, but for `Observability`, which allows
  more keys. `results.session_performance` is `SessionPerformance` (its `SessionRequests`),
  `results.observability` `Observability` (its `ComponentObservability` and `ResourceMetrics`).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analysis.__main__ import main
from loadlib.records import read_records
from tests.analysis.builders import free_running_records, profile_run, protocol_run, session_records
from tests.conftest import FAST_SIM, protocol_profile, run_locust_together

NUMBER = (int, float)
TEXT = (str,)

# --- vllm bench serve's result JSON ------------------------------------------------------------------

VLLM_KEYS = {  # key -> the types vLLM writes there (None where it may write null)
    "date": TEXT, "endpoint_type": TEXT, "backend": TEXT, "label": (str, type(None)), "model_id": TEXT,
    "tokenizer_id": (str, type(None)), "num_prompts": (int,), "request_rate": (float, int, str),
    "burstiness": (float, int, str), "max_concurrency": (int, type(None)), "duration": NUMBER, "completed": (int,),
    "failed": (int,), "total_input_tokens": (int,), "total_output_tokens": (int,), "request_throughput": NUMBER,
    "request_goodput": (float, type(None)), "output_throughput": NUMBER, "total_token_throughput": NUMBER,
    "max_output_tokens_per_s": NUMBER, "max_concurrent_requests": (int,),
    **{f"{stat}_{metric}_ms": NUMBER for stat in ("mean", "median", "std", "p99")
       for metric in ("ttft", "tpot", "itl", "e2el")},
}
VLLM_ARRAYS = {"input_lens": int, "output_lens": int, "ttfts": float, "latencies": float, "start_times": float,
               "queue_times": float, "errors": str}  # one item per request; `itls`: a list of floats per request


def check_vllm_result(result: dict[str, Any]) -> None:
    for key, types in VLLM_KEYS.items():
        assert isinstance(result.get(key, ...), types), f"{key}: {result.get(key, 'missing')!r}"
    datetime.strptime(result["date"], "%Y%m%d-%H%M%S")
    assert result["request_rate"] == "inf" or isinstance(result["request_rate"], NUMBER)
    count = result["num_prompts"]
    for key, item in VLLM_ARRAYS.items():
        assert len(result[key]) == count and all(isinstance(v, item) for v in result[key]), key
    assert len(result["itls"]) == count and all(isinstance(g, float) for gaps in result["itls"] for g in gaps)
    assert result["completed"] + result["failed"] == count
    assert sum(result["output_lens"]) == result["total_output_tokens"]
    assert result["request_throughput"] == pytest.approx(result["completed"] / result["duration"])


# --- llm-d's Benchmark Report 0.2.1 ------------------------------------------------------------------

UNITS = {"quantity": {"count", "pixels"}, "time": {"ms", "s"}, "gen_latency": {"ms/token", "s/token"},
         "gen_throughput": {"tokens/s"}, "request_throughput": {"queries/s"}, "portion": {"percent", "fraction"},
         "memory": {"bytes", "MB", "GB", "TB", "MiB", "GiB", "TiB"}, "power": {"Watts"}}
PERCENTILE_KEYS = ("mode", "min", "p0p1", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "p99p9", "max")


def statistics(units: str) -> dict[str, Any]:
    """`Statistics`: units and mean required; its model keeps pydantic's default for other keys."""
    return {"required": {"units": UNITS[units], "mean": NUMBER},
            "optional": {"stddev": NUMBER, **{key: NUMBER for key in PERCENTILE_KEYS}}, "extra": True}


def model(required: dict[str, Any] | None = None, optional: dict[str, Any] | None = None,
          extra: bool = False) -> dict[str, Any]:
    return {"required": required or {}, "optional": optional or {}, "extra": extra}


SEQUENCE_LENGTH = model({"distribution": {"fixed", "gaussian", "uniform", "other"}, "value": NUMBER},
                        {"std_dev": NUMBER, "min": (int,), "max": (int,)})
GENERIC_COMPONENT = model({"kind": {"generic"}, "tool": TEXT, "tool_version": TEXT}, extra=True)
NATIVE = model(optional={"args": (dict, type(None)), "envars": (dict, type(None)), "config": object})
SESSION_PERFORMANCE = model(optional={"sessions": model({"total": (int,)}, {
    "succeeded": (int,), "failed": (int,), "total_events": (int,), "total_events_completed": (int,),
    "total_events_cancelled": (int,), "session_rate": statistics("request_throughput"),
    "session_duration": statistics("time"), "events_per_session": statistics("quantity"),
    "events_cancelled_per_session": statistics("quantity"), "input_tokens_per_session": statistics("quantity"),
    "output_tokens_per_session": statistics("quantity")})})
RESOURCE_METRICS = model(optional={
    **{name: statistics("portion") for name in ("kv_cache_usage", "cache_hit_rate", "gpu_cache_usage",
                                                "cpu_cache_usage", "gpu_utilization", "cpu_utilization")},
    **{name: statistics("memory") for name in ("gpu_memory_usage", "cpu_memory_usage", "storage_usage")},
    **{name: statistics("quantity") for name in ("running_requests", "waiting_requests", "swapped_requests",
                                                 "preemptions")},
    "power_consumption": statistics("power")})
OBSERVABILITY = model(optional={
    "components": [model({"component_label": TEXT}, {"replica_id": TEXT, "aggregate": RESOURCE_METRICS,
                                                     "time_series": (dict,), "raw_data_path": TEXT, "graph_path": TEXT})],
    "drop_rate": statistics("portion"), "pod_startup_times": (dict,), "replica_status": (dict,)}, extra=True)
REPORT = model({
    "run": model({"uid": TEXT}, {"eid": TEXT, "cid": TEXT, "pid": TEXT, "user": TEXT, "description": TEXT,
                                 "keywords": (list,),
                                 "time": model(optional={"start": "datetime", "end": "datetime", "duration": TEXT})}),
    "results": model(optional={
        "request_performance": model(optional={"aggregate": model(optional={
            "requests": model({"total": (int,)}, {"failures": (int,), "incomplete": (int,),
                                                   "input_length": statistics("quantity"),
                                                   "output_length": statistics("quantity")}),
            "latency": model(optional={"time_to_first_token": statistics("time"),
                                       "normalized_time_per_output_token": statistics("gen_latency"),
                                       "time_per_output_token": statistics("gen_latency"),
                                       "inter_token_latency": statistics("gen_latency"),
                                       "request_latency": statistics("time")}),
            "throughput": model(optional={"input_token_rate": statistics("gen_throughput"),
                                          "output_token_rate": statistics("gen_throughput"),
                                          "total_token_rate": statistics("gen_throughput"),
                                          "request_rate": statistics("request_throughput")})}),
            "time_series": (dict,)}),
        "session_performance": SESSION_PERFORMANCE, "observability": OBSERVABILITY, "profiling": object,
        "component_health": (list,)}),
}, {
    "version": TEXT,
    "scenario": model(optional={
        "stack": [model({"metadata": model({"label": TEXT, "cfg_id": TEXT}, {"schema_version": TEXT,
                                                                            "description": TEXT}),
                         "standardized": GENERIC_COMPONENT, "native": NATIVE})],
        "load": model({
            "metadata": model(optional={"schema_version": TEXT, "cfg_id": TEXT, "description": TEXT}),
            "standardized": model({"tool": TEXT, "tool_version": TEXT, "source": {"random", "sampled", "unknown"},
                                   "input_seq_len": SEQUENCE_LENGTH},
                                  {"parallelism": (int,), "stage": (int,), "output_seq_len": SEQUENCE_LENGTH,
                                   "prefix": (dict,), "rate_qps": NUMBER, "concurrency": (int,),
                                   "multi_turn": model(optional={"enabled": (bool,), "max_turns": SEQUENCE_LENGTH})}),
            "native": NATIVE})}),
})


def check(value: Any, spec: Any, where: str = "report") -> None:
    """Fails naming the first field of `value` that `spec` (the encodings above) refuses."""
    if isinstance(spec, dict):
        assert isinstance(value, dict), f"{where}: not an object"
        for name in spec["required"]:
            assert name in value, f"{where}.{name}: required"
        fields = {**spec["required"], **spec["optional"]}
        for name, item in value.items():
            if name in fields:
                check(item, fields[name], f"{where}.{name}")
            else:
                assert spec["extra"], f"{where}.{name}: not a field of the schema"
    elif isinstance(spec, list):
        assert isinstance(value, list), f"{where}: not a list"
        for i, item in enumerate(value):
            check(item, spec[0], f"{where}[{i}]")
    elif isinstance(spec, set):
        assert value in spec, f"{where}: {value!r} not one of {sorted(spec)}"
    elif spec == "datetime":
        datetime.fromisoformat(value)
    elif spec is not object:
        assert isinstance(value, spec) and not (isinstance(value, bool) and bool not in spec), f"{where}: {value!r}"
        assert not (isinstance(value, float) and not math.isfinite(value)), f"{where}: {value!r}"


def test_the_schema_check_refuses_what_the_schema_refuses():
    good = {"run": {"uid": "u"}, "results": {}}
    check(good, REPORT)
    for bad, field in (({"results": {}}, "report.run: required"),
                       ({**good, "runs": 1}, "report.runs: not a field"),
                       ({**good, "results": {"request_performance": {"aggregate": {"latency": {
                           "time_to_first_token": {"units": "tokens/s", "mean": 1.0}}}}}}, "tokens/s"),
                       ({**good, "scenario": {"load": {"metadata": {}, "native": {}, "standardized": {
                           "tool": "t", "tool_version": "1", "source": "made-up",
                           "input_seq_len": {"distribution": "fixed", "value": 1}}}}}, "made-up"),
                       ({**good, "results": {"session_performance": {"sessions": {"failed": 1}}}},
                        "sessions.total: required"),
                       ({**good, "results": {"session_performance": {"sessions": {
                           "total": 1, "session_duration": {"units": "count", "mean": 1.0}}}}}, "count"),
                       ({**good, "results": {"observability": {"components": [{"replica_id": "target"}]}}},
                        r"components\[0\].component_label: required"),
                       ({**good, "results": {"observability": {"components": [{"component_label": "server", "aggregate": {
                           "power_consumption": {"units": "W", "mean": 200.0}}}]}}}, "'W' not one of"),
                       ({**good, "results": {"observability": {"components": [{"component_label": "server", "aggregate": {
                           "requests_running": {"units": "count", "mean": 2.0}}}]}}}, "requests_running: not a field")):
        with pytest.raises(AssertionError, match=field):
            check(bad, REPORT)
    check({**good, "results": {"observability": {"vllm_kv_cache_usage_perc": 0.4}}}, REPORT)  # its own keys: allowed


# --- the exports --------------------------------------------------------------------------------------

MANIFEST = {"model": "qwen", "started_at": "2026-12-07T09:00:00+0000", "tool": {"name": "uni-locust", "version": "0.1.0"},
            "command": ["locust", "-u", "2"], "protocol": {"processes": None},
            "server": {"kind": "sglang", "version": "0.5.2", "launch": {"tp_size": 2}}}


def exported(tmp_path: Path, run_dir: Path, fmt: str, capsys: pytest.CaptureFixture[str],
             printed: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Each file the export wrote, by cell; `printed` gets what it printed, one line a file."""
    out = tmp_path / f"out-{fmt}"
    assert main(["export", str(run_dir), "--format", fmt, "--out", str(out)]) == 0
    printed = printed if printed is not None else []
    printed += capsys.readouterr().out.splitlines()
    files = {path.stem: json.loads(path.read_text()) for path in sorted(out.glob("*.json"))}
    assert sorted(line.split()[0] for line in printed) == [str(out / f"{cell}.json") for cell in files]
    return files


def test_vllm_result_has_vllms_keys_and_the_cells_figures_by_hand(write_run, tmp_path, capsys):
    """Two closed-loop users, 2 s a request (TTFT 0.5 s, 151 tokens), one of 21 tokens, one failure:
    window 0-7 s; 6 completed, 776 tokens; TPOT 1.5/150 = 10 ms (five), 1.5/20 = 75 ms (one);
    25 chunks: a gap of 1.5/24 = 62.5 ms; two requests in flight at most."""
    result = exported(tmp_path, write_run(free_running_records(), MANIFEST), "vllm", capsys)["steady"]
    check_vllm_result(result)
    assert (result["label"], result["model_id"], result["max_concurrency"]) == ("steady", "qwen", 2)
    assert (result["completed"], result["failed"], result["duration"]) == (6, 1, 7.0)
    assert result["output_throughput"] == pytest.approx(776 / 7)
    assert (result["mean_ttft_ms"], result["p99_ttft_ms"], result["mean_e2el_ms"]) == (500.0, 500.0, 2000.0)
    assert result["mean_tpot_ms"] == pytest.approx((5 * 10 + 75) / 6)
    assert result["median_tpot_ms"] == pytest.approx(10.0)
    assert result["mean_itl_ms"] == pytest.approx(62.5)
    assert result["itls"][0] == pytest.approx([0.0625] * 24)
    failed = result["errors"].index("http_500")
    assert (result["ttfts"][failed], result["output_lens"][failed], result["itls"][failed]) == (0.0, 0, [])
    assert result["max_concurrent_requests"] == 2
    assert result["request_rate"] == "inf"


STALLED = ",".join(["50"] * 23 + ["350"])  # 1.5 s from the first chunk to the last, one 350 ms stall among them


def with_gaps(records: list[dict[str, Any]], which: int | None = None) -> list[dict[str, Any]]:
    """free_running_records with each successful request's gaps as `--chunk-times` keeps them (the
    first `which` of them; None: all), the failed one's none."""
    done = [i for i, record in enumerate(records) if not record["error"]][:which]
    return [{**record, "chunk_gaps_ms": STALLED if i in done else "" if record["error"] else None}
            for i, record in enumerate(records)]


def test_vllm_itls_are_the_measured_gaps_where_the_run_kept_them(write_run, tmp_path, capsys):
    """Six requests of 24 gaps each, 23 of 50 ms and one of 350 ms (the same 1.5 s as 24 of 62.5 ms):
    144 gaps, 6 of them stalls; p99 = numpy's linear at rank 141.57 of the sorted gaps = 350 ms;
    population std = sqrt((138 x 12.5^2 + 6 x 287.5^2) / 144) ms. Without them, every gap is 62.5 ms."""
    result = exported(tmp_path, write_run(with_gaps(free_running_records()), MANIFEST), "vllm", capsys)["steady"]
    check_vllm_result(result)
    assert result["itls"][0] == pytest.approx([0.05] * 23 + [0.35])
    failed = result["errors"].index("http_500")
    assert result["itls"][failed] == []
    assert result["mean_itl_ms"] == pytest.approx(62.5)  # as with the mean gaps
    assert (result["median_itl_ms"], result["p95_itl_ms"], result["p99_itl_ms"]) == pytest.approx((50.0, 50.0, 350.0))
    assert result["std_itl_ms"] == pytest.approx(((138 * 12.5 ** 2 + 6 * 287.5 ** 2) / 144) ** 0.5)
    assert result["notes"][0].startswith("itls: per request") and "as the client measured it" in result["notes"][0]
    plain = exported(tmp_path, write_run(free_running_records(), MANIFEST, name="plain"), "vllm", capsys)["steady"]
    assert (plain["std_itl_ms"], plain["p99_itl_ms"]) == pytest.approx((0.0, 62.5))
    assert "each is the request's mean gap" in plain["notes"][0]


def test_vllm_itls_of_a_cell_partly_measured_say_how_many(write_run, tmp_path, capsys):
    records = with_gaps(free_running_records(), which=2)
    result = exported(tmp_path, write_run(records, MANIFEST), "vllm", capsys)["steady"]
    check_vllm_result(result)
    assert "for 2 of the 6 successful requests" in result["notes"][0]
    assert sorted(gaps[-1] for gaps in result["itls"] if gaps) == pytest.approx([0.0625] * 4 + [0.35] * 2)


def test_measured_gaps_read_back_from_the_vllm_result_and_mean_gaps_do_not(write_run, tmp_path, capsys):
    """The result of a run that kept its gaps reads back with them (each request's longest gap
    among the steady percentiles, as in the run's own report); one of mean gaps reads back with none,
    as a run without --chunk-times."""
    from loadlib.run_view import read_run

    for name, records, kept in (("kept", with_gaps(free_running_records()), True),
                                ("mean", free_running_records(), False)):
        run_dir = write_run(records, MANIFEST, name=name)
        exported(tmp_path / name, run_dir, "vllm", capsys)
        back = read_run(tmp_path / name / "out-vllm" / "steady.json").records
        own = read_run(run_dir).records
        assert back["chunk_gaps_ms"].notna().sum() == (6 if kept else 0)
        pd.testing.assert_series_equal(back["chunk_gaps_ms"].dropna().reset_index(drop=True),
                                       own["chunk_gaps_ms"][own["ok"]].dropna().reset_index(drop=True))


def test_llmd_report_has_the_schemas_fields_and_the_cells_figures(write_run, tmp_path, capsys):
    reports = exported(tmp_path, write_run(protocol_run(), MANIFEST), "llmd", capsys)
    assert list(reports) == ["c2-different", "c2-same", "single"]  # files by name; stages in reading order
    for report in reports.values():
        check(report, REPORT)
    stages = {name: report["scenario"]["load"]["standardized"]["stage"] for name, report in reports.items()}
    assert stages == {"single": 0, "c2-same": 1, "c2-different": 2}
    single = reports["single"]
    assert single["version"] == "0.2.1"
    assert len({report["run"]["eid"] for report in reports.values()}) == 1  # one experiment ...
    assert len({report["run"]["uid"] for report in reports.values()}) == 3  # ... of three reports
    requests = single["results"]["request_performance"]["aggregate"]["requests"]
    assert (requests["total"], requests["failures"]) == (6, 1)
    latency = single["results"]["request_performance"]["aggregate"]["latency"]
    # TTFT of the five that succeeded: 0.1 0.2 0.3 0.5 0.7
    assert latency["time_to_first_token"]["mean"] == pytest.approx(0.36)
    assert latency["time_to_first_token"]["p50"] == pytest.approx(0.3)
    assert latency["time_per_output_token"]["units"] == "s/token"
    stack = single["scenario"]["stack"][0]
    assert stack["standardized"] == {"kind": "generic", "tool": "sglang", "tool_version": "0.5.2",
                                     "model": {"name": "qwen"}}
    assert stack["native"]["args"] == {"tp_size": 2}
    assert reports["c2-same"]["scenario"]["load"]["standardized"]["concurrency"] == 2


def test_llmd_reports_a_conversations_turns(write_run, tmp_path, capsys):
    """profile_run's single cell holds a conversation's turns 0 and 1: two requests at most."""
    reports = exported(tmp_path, write_run(profile_run(), MANIFEST), "llmd", capsys)
    for report in reports.values():
        check(report, REPORT)
    load = reports["single"]["scenario"]["load"]["standardized"]
    assert load["multi_turn"] == {"enabled": True, "max_turns": {"distribution": "other", "value": 2, "max": 2}}
    assert "multi_turn" not in reports["c2-radix-hit"]["scenario"]["load"]["standardized"]


def test_llmd_reports_a_sessions_cells_sessions(write_run, tmp_path, capsys):
    """session_records' two sessions, the last sub-agent's turn failed: a (lane 0) two turns from 0 s
    to 3 s, b (lane 1) three from 0.5 s to 2.7 s; 1,000 prompt tokens a turn, 101 completion tokens
    an answer; the cell's window 0-3 s."""
    records = session_records()
    records[-1] = {**records[-1], "error": "http_500", "http_status": 500, "ttft_s": None, "completion_tokens": None}
    printed: list[str] = []
    report = exported(tmp_path, write_run(records, MANIFEST), "llmd", capsys, printed)["sessions-u2"]
    check(report, REPORT)
    assert printed == [f"{tmp_path / 'out-llmd' / 'sessions-u2.json'}  stage 0 sessions-u2: 5 requests, 1 failed; "
                       "2 sessions, 1 failed"]
    sessions = report["results"]["session_performance"]["sessions"]
    counts = ("total", "succeeded", "failed", "total_events", "total_events_completed")
    assert [sessions[key] for key in counts] == [2, 1, 1, 5, 4]
    assert sessions["session_rate"] == {"units": "queries/s", "mean": pytest.approx(2 / 3)}
    duration = sessions["session_duration"]
    assert duration["units"] == "s" and [duration[key] for key in ("min", "mean", "max")] == pytest.approx([2.2, 2.6, 3.0])
    assert [sessions["events_per_session"][key] for key in ("units", "min", "max")] == ["count", 2, 3]
    assert [sessions["input_tokens_per_session"][key] for key in ("min", "max")] == [2000, 3000]
    assert [sessions["output_tokens_per_session"][key] for key in ("min", "max")] == [202, 202]
    assert "events_cancelled_per_session" not in sessions  # a turn never sent leaves no record
    assert "observability" not in report["results"]  # nothing scraped


def sglang_page(running: int, queued: int, token_usage: float, cached: int, prompt: int) -> str:
    """SGLang's /metrics as the run keeps it: its scheduler's gauges and its prompt-token counters."""
    return (f"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs {running}\n"
            f"# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs {queued}\n"
            f"# TYPE sglang:token_usage gauge\nsglang:token_usage {token_usage}\n"
            f"# TYPE sglang:cached_tokens counter\nsglang:cached_tokens_total {cached}\n"
            f"# TYPE sglang:prompt_tokens counter\nsglang:prompt_tokens_total {prompt}\n")


def dcgm_page(energy_mj: int, watts: int) -> str:
    return (f'# TYPE DCGM_FI_DEV_POWER_USAGE gauge\nDCGM_FI_DEV_POWER_USAGE{{gpu="0"}} {watts}\n'
            f'# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n'
            f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0"}} {energy_mj}\n')


def scraped(offset: float, phase: str, text: str, source: str = "target", cell: str | None = "steady") -> dict:
    """One scrape as metrics.jsonl keeps it, `offset` seconds after free_running_records' first send."""
    return {"t": 1_700_000_000.0 + offset, "source": source, "url": f"http://127.0.0.1:30000/{source}", "phase": phase,
            "cell_index": 0 if cell else None, "cell": cell, "case": "steady" if cell else None, "error": None,
            "text": text}


def test_llmd_reports_what_the_run_scraped_of_its_server_during_the_cell(write_run, tmp_path, capsys):
    """The steady cell (0-7 s) framed by scrapes at -0.1 s and 7.1 s, two scrapes during it: running
    2 then 1, queued 0 then 3, KV cache 25 % then 75 %; 300 of 1,000 prompt tokens cached over the
    cell (counters). The GPU meter counts 1,440 J in 7.2 s (200 W), 250 W at most. Scrapes outside
    the cell (running 9) are not its."""
    run_dir = write_run(free_running_records(), MANIFEST)
    entries = [scraped(-1.0, "run-start", sglang_page(9, 9, 1.0, 0, 0), cell=None),
               scraped(-0.1, "start", sglang_page(0, 0, 0.1, 100, 100)),
               scraped(2.0, "interval", sglang_page(2, 0, 0.25, 200, 500)),
               scraped(4.0, "interval", sglang_page(1, 3, 0.75, 300, 800)),
               scraped(7.1, "end", sglang_page(0, 0, 0.5, 400, 1100)),
               scraped(8.0, "interval", sglang_page(9, 9, 1.0, 400, 1100), cell=None),
               scraped(-0.1, "start", dcgm_page(0, 150), "gpu"),
               scraped(3.5, "interval", dcgm_page(700_000, 250), "gpu"),
               scraped(7.1, "end", dcgm_page(1_440_000, 190), "gpu")]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    printed: list[str] = []
    report = exported(tmp_path, run_dir, "llmd", capsys, printed)["steady"]
    check(report, REPORT)
    assert printed[0].endswith("stage 0 steady: 7 requests, 1 failed; observability of target, gpu")
    label = report["scenario"]["stack"][0]["metadata"]["label"]
    target, gpu = report["results"]["observability"]["components"]
    assert (target["component_label"], target["replica_id"], gpu["component_label"], gpu["replica_id"]) == (
        label, "target", label, "gpu")
    server = target["aggregate"]
    assert [server["running_requests"][key] for key in ("units", "mean", "min", "max")] == ["count", 1.5, 1, 2]
    assert [server["waiting_requests"][key] for key in ("mean", "max")] == [1.5, 3]
    assert [server["kv_cache_usage"][key] for key in ("units", "mean", "p50", "max")] == ["fraction", 0.5, 0.5, 0.75]
    assert server["cache_hit_rate"] == {"units": "fraction", "mean": pytest.approx(0.3)}
    assert gpu["aggregate"] == {"power_consumption": {"units": "Watts", "mean": pytest.approx(200.0), "max": 250.0}}
    assert "session_performance" not in report["results"]


def test_an_exported_vllm_result_reads_back_to_the_same_figures(write_run, tmp_path, capsys):
    """Without the failure: vLLM keeps no duration of a failed request (its latency is 0), and a
    failed request held its stream until it ended, which the steady window counts."""
    run_dir = write_run([record for record in free_running_records() if not record["error"]], MANIFEST)
    exported(tmp_path, run_dir, "vllm", capsys)
    assert main(["compare", str(run_dir), str(tmp_path / "out-vllm" / "steady.json"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["tables"]["comparison"]
    by_run = {}
    for row in rows:
        by_run.setdefault(row["run"], {})[row["figure"]] = row["value"]
    assert set(by_run) == {"run", "steady"}
    assert by_run["run"].keys() == by_run["steady"].keys() >= {"steady TTFT p50 s", "steady steady all-streams t/s"}
    for figure, value in by_run["run"].items():
        assert by_run["steady"][figure] == pytest.approx(value), figure


def test_a_vllm_result_without_its_arrays_gives_figures_without_intervals_and_says_so(write_run, tmp_path, capsys):
    run_dir = write_run(free_running_records(), MANIFEST)
    result = exported(tmp_path, run_dir, "vllm", capsys)["steady"]
    summary = {key: value for key, value in result.items() if not isinstance(value, list)}  # no --save-detailed
    summary.update(median_ttft_ms=400.0, p99_ttft_ms=600.0)
    (tmp_path / "vllm-summary.json").write_text(json.dumps(summary))
    assert main(["compare", str(run_dir), str(tmp_path / "vllm-summary.json")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"steady TTFT p50 s\s+0\.500\s+0\.400 -20\.0%\n", out)
    assert re.search(r"steady TTFT p99 s\s+0\.500\s+0\.600 \+20\.0%\n", out)
    assert re.search(r"steady steady all-streams t/s\s+[\d.,]+\s+-\n", out)
    assert ("vllm-summary: a vllm bench serve result without its per-request arrays (--save-detailed): figures "
            "from its summary, no interval, no verdict") in out
    assert "steady TTFT p50 s: vllm-summary is" not in out  # no verdict drawn


@pytest.mark.parametrize("content, problem", [
    ("[load]\nmode = 'closed'\n", "neither a run directory nor a vllm bench serve result JSON (not JSON)"),
    ('{"hello": 1}', "neither a run directory nor a vllm bench serve result JSON (no completed and request_throughput)"),
])
def test_a_file_that_is_neither_a_run_nor_a_vllm_result_is_one_line_exit_2(tmp_path, write_run, capsys, content,
                                                                            problem):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert main(["compare", str(write_run(free_running_records())), str(bad)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"python -m analysis compare: {bad}: {problem}"]


def test_an_export_of_no_request_or_of_a_vllm_result_is_one_line_exit_2(write_run, tmp_path, capsys):
    empty = write_run([], name="empty")
    assert main(["export", str(empty), "--format", "llmd"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"python -m analysis export: {empty}: no measured request in the run"]
    result = tmp_path / "vllm.json"
    result.write_text(json.dumps(vllm_native_result()))
    assert main(["export", str(result), "--format", "llmd"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"python -m analysis export: {result}: not a run directory"]


def test_an_unknown_export_format_is_one_line_exit_2(write_run, capsys):
    assert main(["export", str(write_run(free_running_records())), "--format", "csv"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "python -m analysis export: unknown --format 'csv' (one of: vllm, llmd)"]


SESSIONS_PROFILE = """
[load]
mode = "sessions"
sessions = 2
[scenarios.agent]
kind = "agent-trace"
path = "{path}"
think_time_scale = 0.0
"""


@pytest.mark.processes
def test_real_runs_export_both_formats_and_the_vllm_result_reads_back(tmp_path):
    """A closed-loop run and a run of two agent sessions against the simulator, its /metrics scraped
    every 0.2 s, exported (the closed run by the command line); each file checked against its
    schema, the llm-d reports with what the server's gauges said during the cell and the sessions'
    figures, and compare reads the vLLM result as the closed run's twin."""
    from loadlib.scenarios.cc_traces import write_jsonl
    from loadlib.scenarios.cc_traces_gen import SessionShape, generate

    (tmp_path / "closed.toml").write_text(protocol_profile("closed", 32, duration_s=1.5, warmup_s=0.3))
    write_jsonl(generate(2, seed=3, scope="local", shape=SessionShape(
        turns=(2, 3), tool_call_out=(8, 16), answer_out=(8, 16), subagent_share=0.0, tool_result_tokens=(100, 500),
        tool_tokens=(1000, 2000), system_tokens=(500, 1000))), tmp_path / "trace.jsonl")
    (tmp_path / "sessions.toml").write_text(SESSIONS_PROFILE.format(path=tmp_path / "trace.jsonl"))
    dirs = {"closed": tmp_path / "run", "sessions": tmp_path / "sessions"}  # compare names the closed run "run"
    runs = run_locust_together({name: (["--headless", "-u", "2", "--profile", str(tmp_path / f"{name}.toml"),
                                        "--sim-args", FAST_SIM, "--metrics-interval", "0.2", "--run-dir", str(run_dir)],
                                       tmp_path) for name, run_dir in dirs.items()})
    for name, done in runs.items():
        assert done.returncode == 0, (name, done.stderr[-2000:])
    for fmt in ("vllm", "llmd"):
        done = subprocess.run([sys.executable, "-m", "analysis", "export", str(dirs["closed"]), "--format", fmt],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split()[0] == str(dirs["closed"] / "exports" / fmt / "closed.json")
    assert main(["export", str(dirs["sessions"]), "--format", "llmd"]) == 0
    result = json.loads((dirs["closed"] / "exports" / "vllm" / "closed.json").read_text())
    check_vllm_result(result)
    assert result["completed"] > 10 and result["model_id"]
    closed = json.loads((dirs["closed"] / "exports" / "llmd" / "closed.json").read_text())
    check(closed, REPORT)
    [target] = closed["results"]["observability"]["components"]
    assert (target["component_label"], target["replica_id"]) == (closed["scenario"]["stack"][0]["metadata"]["label"],
                                                                  "target")
    running = target["aggregate"]["running_requests"]
    assert 0 < running["mean"] <= running["max"] <= 2  # two users
    [(name, sessions_report)] = [(path.stem, json.loads(path.read_text()))
                                 for path in (dirs["sessions"] / "exports" / "llmd").glob("*.json")]
    check(sessions_report, REPORT)
    records = [r for r in read_records(dirs["sessions"]) if r["measured"] and r["cell"] == name]
    sessions = sessions_report["results"]["session_performance"]["sessions"]
    assert sessions["total"] == len({(r["conversation"], r["copy"]) for r in records}) == 2
    assert sessions["total_events"] == len(records) and sessions["failed"] == 0
    done = subprocess.run([sys.executable, "-m", "analysis", "compare", str(dirs["closed"]),
                           str(dirs["closed"] / "exports" / "vllm" / "closed.json"), "--json"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    figures = {}
    for row in json.loads(done.stdout)["tables"]["comparison"]:
        figures.setdefault(row["figure"], {})[row["run"]] = row["value"]
    assert figures["closed TTFT p50 s"]["run"] == pytest.approx(figures["closed TTFT p50 s"]["closed"])
    assert figures["closed steady all-streams t/s"]["run"] == pytest.approx(
        figures["closed steady all-streams t/s"]["closed"])


def vllm_native_result(**traffic: Any) -> dict[str, Any]:
    """A result as `vllm bench serve --save-result --save-detailed` writes it (perf-counter start
    times, no label): 2 streams, 3 requests of TTFT 0.2 s and 1.0 s in all, 41 tokens in 41
    chunks (40 gaps of 20 ms), and one failure."""
    result = {"date": "20261207-091500", "endpoint_type": "openai-chat", "backend": "openai-chat", "label": None,
              "model_id": "Qwen/Qwen3-8B", "tokenizer_id": "Qwen/Qwen3-8B", "num_prompts": 4,
              "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 2, "duration": 2.0, "completed": 3,
              "failed": 1, "total_input_tokens": 300, "total_output_tokens": 123, "request_throughput": 1.5,
              "request_goodput": None, "output_throughput": 61.5, "total_token_throughput": 211.5,
              "input_lens": [100, 100, 100, 100], "output_lens": [41, 41, 41, 0], "ttfts": [0.2, 0.2, 0.2, 0.0],
              "itls": [[0.02] * 40, [0.02] * 40, [0.02] * 40, []], "latencies": [1.0, 1.0, 1.0, 0.0],
              "start_times": [5000.0, 5000.0, 5001.0, 5001.0], "queue_times": [0.0, 0.0, 0.0, 0.0],
              "generated_texts": ["a", "b", "c", ""], "errors": ["", "", "", "Bad Request"],
              "max_output_tokens_per_s": 82.0, "max_concurrent_requests": 2, "rtfx": 0.0,
              "mean_ttft_ms": 200.0, "median_ttft_ms": 200.0, "std_ttft_ms": 0.0, "p99_ttft_ms": 200.0}
    result.update(traffic)
    return result


@pytest.mark.parametrize("traffic, cell, case", [({}, "closed", "closed"),
                                                 ({"request_rate": 2.0, "queue_times": [0.0, 0.5, 0.0, 0.5]},
                                                  "open-2rps", "open")])
def test_a_vllm_result_reads_as_one_free_running_cell_of_its_requests(tmp_path, traffic, cell, case):
    from loadlib.run_view import read_run

    path = tmp_path / "vllm-qwen.json"
    path.write_text(json.dumps(vllm_native_result(**traffic)))
    view = read_run(path)
    records = view.records
    assert (view.label, view.manifest["model"], view.path) == ("vllm-qwen", "Qwen/Qwen3-8B", None)
    assert list(records["cell"].unique()) == [cell] and list(records["case"].unique()) == [case]
    assert list(records["ok"]) == [True, True, True, False]
    assert records.loc[3, "error"] == "Bad Request"
    assert list(records["decode_tps"][:3]) == pytest.approx([50.0] * 3)  # 40 tokens after the first in 0.8 s
    assert list(records["chunks"][:3]) == [41] * 3
    assert list(records["chunk_gaps_ms"][:3]) == [",".join(["20"] * 40)] * 3  # vLLM's itls: measured gaps
    assert records["chunk_gaps_ms"].isna()[3]
    assert list(records["concurrency"].unique()) == [2]
    if case == "open":
        assert list(records["scheduled_at"]) == [5000.0, 4999.5, 5001.0, 5000.5]
        assert list(records["queue_s"]) == [0.0, 0.5, 0.0, 0.5]
    else:
        assert records["closed_loop"].all() and records["scheduled_at"].isna().all()


def test_a_run_of_several_servers_exports_a_folder_per_server(write_run, tmp_path, capsys):
    records = [{**record, "target": target} for target in ("A", "B") for record in free_running_records()]
    manifest = {**MANIFEST, "targets": [{"label": "A"}, {"label": "B"}]}
    out = tmp_path / "out"
    assert main(["export", str(write_run(records, manifest)), "--format", "vllm", "--out", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{out / target / 'steady.json'}  steady: 6 completed, 1 failed"
                                                     for target in ("A", "B")]
    for target in ("A", "B"):
        check_vllm_result(json.loads((out / target / "steady.json").read_text()))


def test_a_vllm_summary_is_named_by_its_traffic_and_published_with_its_count(tmp_path):
    """`vllm bench serve --save-result` without --save-detailed at --request-rate 1: no arrays."""
    from loadlib.run_view import read_run

    summary = {key: value for key, value in vllm_native_result(request_rate=1.0).items()
               if not isinstance(value, list)}
    path = tmp_path / "rate1.json"
    path.write_text(json.dumps(summary))
    view = read_run(path)
    assert view.records.empty
    published = view.published.figures.set_index("figure")
    assert list(published.index) == ["open-1rps TTFT p50 s", "open-1rps TTFT p99 s"]
    assert list(published["value"]) == [0.2, 0.2] and list(published["n"]) == [3, 3]
    assert published["low"].isna().all() and published["high"].isna().all()


STALL_S = 5 * 0.05  # the simulator's stall fault (5 s, its default) at --time-scale 0.05
STALLING_SIM = "--time-scale 0.05 --fault stall@0.5 --fault-seed 3"


@pytest.mark.processes
def test_a_run_with_chunk_times_exports_each_gap_and_a_stall_in_the_request_it_held(tmp_path):
    """One closed-loop stream against simulators that hold half the requests (their fault picker's
    seeded draws, one per request in the order sent) for 0.25 s halfway through the answer, with
    and without --chunk-times. With it, each record keeps one gap per chunk after the first,
    summing to its first chunk's distance to its last, and the exported itls show the stall as one
    gap of at least 0.25 s in each request the simulator held and in no other; without it, the
    records keep none and the export spreads each stall over its request's gaps, as before."""
    from loadlib.records import chunk_gaps_s
    from loadlib.sim.faults import FaultPicker, parse_spec

    (tmp_path / "closed.toml").write_text(protocol_profile("closed", 64, duration_s=1.5, warmup_s=0.3))
    dirs = {name: tmp_path / name for name in ("kept", "plain")}
    runs = run_locust_together({name: (["--headless", "-u", "1", "--profile", str(tmp_path / "closed.toml"),
                                        "--sim-args", STALLING_SIM, "--run-dir", str(run_dir),
                                        *(["--chunk-times"] if name == "kept" else [])], tmp_path)
                                for name, run_dir in dirs.items()})
    exports = {}
    for name, done in runs.items():
        assert done.returncode == 0, (name, done.stderr[-2000:])
        assert main(["export", str(dirs[name]), "--format", "vllm"]) == 0
        exports[name] = json.loads((dirs[name] / "exports" / "vllm" / "closed.json").read_text())
        check_vllm_result(exports[name])
    for name, result in exports.items():
        picker = FaultPicker([parse_spec("stall@0.5")], seed=3)  # as the simulator's, drawn as it drew
        sent = sorted(read_records(dirs[name]), key=lambda record: record["sent_at"])  # warm-up too: one stream
        held = {record["request_id"]: picker.pick(None) is not None for record in sent}
        cell = [record for record in sent if record["measured"] and record["cell"] == "closed"]
        assert result["completed"] == len(cell) > 4 and {True, False} <= {held[r["request_id"]] for r in cell}
        for record, itls in zip(cell, result["itls"]):
            assert len(itls) == record["chunks"] - 1
            if name == "kept":
                assert chunk_gaps_s(record["chunk_gaps_ms"]) == itls
                assert sum(itls) == pytest.approx(record["last_chunk_s"] - record["ttft_s"], abs=6e-6)
                assert sum(gap >= STALL_S for gap in itls) == held[record["request_id"]], record["request_id"]
            else:
                assert record["chunk_gaps_ms"] is None and max(itls) < STALL_S
                assert itls == pytest.approx([itls[0]] * len(itls))  # the request's mean gap
    assert "as the client measured it" in exports["kept"]["notes"][0]
    assert "each is the request's mean gap" in exports["plain"]["notes"][0]
    assert exports["kept"]["p99.9_itl_ms"] >= STALL_S * 1000 > exports["plain"]["p99.9_itl_ms"]
    assert "max_chunk_gap_s" in (dirs["kept"] / "summary.txt").read_text()
    assert "max_chunk_gap_s" not in (dirs["plain"] / "summary.txt").read_text()
