"""The protocol end to end: real headless Locust against the simulator over loopback HTTP."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pandas as pd
import pyarrow.parquet
import pytest

from loadlib.figures import formulas, protocol_tables
from loadlib.record_table import exact_frame, read_records_frame, records_frame
from loadlib.records import read_records
from loadlib.report.protocol import protocol_summary
from tests.conftest import FAST_SIM, free_port, run_locust, run_locust_together

BASE = ["--headless", "--rounds", "2", "--loglevel", "WARNING"]


def read_trace(path) -> dict[str, dict]:
    return {row["request_id"]: row for row in map(orjson.loads, path.read_bytes().splitlines())}


@pytest.fixture(scope="module")
def protocol_run(tmp_path_factory):
    """One 4-user protocol run (single stream + 2 and 4 streams) with the simulator's trace."""
    work = tmp_path_factory.mktemp("run")
    trace = work / "trace.jsonl"
    result = run_locust([*BASE, "-u", "4", "--run-dir", str(work / "r"),
                         "--sim-args", f"{FAST_SIM} --trace {trace}"], cwd=work)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, work / "r", read_trace(trace)


@pytest.mark.processes
def test_run_keeps_one_valid_record_per_request_of_the_plan(protocol_run):
    _result, run_dir, _trace = protocol_run
    df = pd.DataFrame(list(read_records(run_dir)))
    # 4 scenarios x 2 rounds, then (2 + 2 + 4 + 4) streams x 2 rounds
    assert len(df) == 8 + 24
    assert df["error"].isna().all(), df["error"].dropna().tolist()
    assert df.groupby("cell")["round"].nunique().eq(2).all()
    assert set(df.loc[df["cell"] == "c4-different", "scenario"]) == {"code", "code_b", "code_c", "code_d"}
    assert set(df.loc[df["cell"] == "c4-same", "scenario"]) == {"code"}
    assert (df["completion_tokens"] == 512).all()


@pytest.mark.processes
def test_streams_of_a_round_start_together(protocol_run):
    _result, run_dir, _trace = protocol_run
    df = pd.DataFrame(list(read_records(run_dir)))
    spread = df[df["concurrency"] > 1].groupby(["cell", "round"])["sent_at"].agg(lambda s: s.max() - s.min())
    assert (spread < 0.02).all(), spread.to_dict()


@pytest.mark.processes
def test_per_request_figures_match_the_simulators_own_timing(protocol_run):
    _result, run_dir, trace = protocol_run
    records, decodes_compared = list(read_records(run_dir)), 0
    for record in records:
        sim = trace[record["request_id"]]
        assert record["completion_tokens"] == sim["completion_tokens"]
        assert record["prompt_tokens"] == sim["prompt_tokens"]
        assert record["chunks"] == sim["chunks"]
        sim_ttft = sim["first_token_at"] - sim["received_at"]
        assert record["ttft_s"] == pytest.approx(sim_ttft, abs=0.01)
        if record["total_s"] == record["ttft_s"]:
            continue  # the whole answer in one read (a client late on a loaded machine): no decode rate, as the tool says
        sim_decode = formulas.decode_tps(sim["completion_tokens"], sim["first_token_at"], sim["done_at"])
        client_decode = formulas.decode_tps(record["completion_tokens"], record["ttft_s"], record["total_s"])
        assert client_decode == pytest.approx(sim_decode, rel=0.05)
        decodes_compared += 1
    assert decodes_compared >= 0.9 * len(records)


@pytest.mark.processes
def test_round_aggregates_match_the_simulators_timing(protocol_run):
    _result, run_dir, trace = protocol_run
    records = list(read_records(run_dir))
    rounds: dict[tuple[str, int], list[dict]] = {}
    for record in records:
        if record["concurrency"] > 1:
            rounds.setdefault((record["cell"], record["round"]), []).append(trace[record["request_id"]])
    table = protocol_tables.round_aggregates(records_frame(records)).set_index(["cell", "round"])
    for key, sims in rounds.items():
        expected = sum(s["completion_tokens"] - 1 for s in sims) / max(s["done_at"] - s["first_token_at"] for s in sims)
        assert table.loc[key, "aggregate_tps"] == pytest.approx(expected, rel=0.05), key


@pytest.mark.processes
def test_live_summary_equals_the_post_processors_report(protocol_run):
    """The report, recomputed from the records and the final manifest on disk, is the manifest,
    then the live summary to the character, then more figures."""
    result, run_dir, _trace = protocol_run
    live = (run_dir / "summary.txt").read_text(encoding="utf-8").rstrip("\n")
    report = subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir)],
                            capture_output=True, text=True, check=True).stdout
    assert live.startswith("uni-bench summary: ") and "\nSingle stream (decode" in live
    manifest_block = report[:report.index("\nuni-bench summary: ") + 1]
    assert manifest_block.startswith("Manifest\n") and manifest_block.endswith("\n\n")
    assert report.startswith(manifest_block + live + "\n\n")
    assert live in result.stdout and f"Run files: {run_dir}" in result.stdout
    as_json = orjson.loads(subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir), "--json"],
                                          capture_output=True, check=True).stdout)
    expected = protocol_summary(read_records(run_dir))
    assert as_json["single"] == expected["single"] and as_json["concurrent"] == expected["concurrent"]
    cells = {(row["cell"], row["concurrency"], row["case"]) for row in as_json["concurrent"]}
    assert cells == {("c2-same", 2, "same"), ("c2-different", 2, "different"), ("c4-same", 4, "same"),
                     ("c4-different", 4, "different")}


@pytest.mark.processes
def test_the_run_leaves_its_journals_columnar_copy_for_the_report(protocol_run):
    _result, run_dir, _trace = protocol_run
    copy = pyarrow.parquet.read_table(run_dir / "records.parquet")
    assert copy.num_rows == sum(1 for _ in read_records(run_dir)) and "measured" in copy.column_names
    pd.testing.assert_frame_equal(read_records_frame(run_dir), exact_frame(run_dir / "records.jsonl"),
                                  check_categorical=False)


@pytest.mark.processes
def test_manifest_describes_the_run(protocol_run):
    _result, run_dir, _trace = protocol_run
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    assert manifest["target"]["builtin_simulator"] is True
    assert manifest["protocol"]["rounds"] == 2 and manifest["protocol"]["max_tokens"] == 512
    assert manifest["protocol"]["concurrency"] == [2, 4]
    assert manifest["protocol"]["thinking"] == "off"


BAD_INPUTS = [  # arguments, what the last stderr line must name
    (["--rounds", "0"], "--rounds"),
    (["--concurrency", "2,x"], "--concurrency"),
    (["--thinking", "maybe"], "--thinking"),
    (["--scenarios", "code,poetry"], "--scenarios"),
    (["--host", "gpu-box:8000"], "--host"),
]
SECRET = "sk-test-4b1d-never-written"


@pytest.fixture(scope="module")
def short_runs(tmp_path_factory):
    """The module's short independent runs, started together (each test reads its own): two
    processes, an unreachable host, an API key from the environment, and each bad input."""
    work = tmp_path_factory.mktemp("short")
    port = str(free_port())  # not Locust's default *:5557, which other runs may hold
    runs = {
        "two processes": [*BASE, "-u", "4", "--processes", "2", "--concurrency", "2,4",
                          "--master-bind-host", "127.0.0.1", "--master-bind-port", port, "--master-port", port,
                          "--scenarios", "code", "--sim-args", FAST_SIM],
        "unreachable": [*BASE, "-u", "2", "--rounds", "1", "--host", "http://127.0.0.1:9", "--model", "m"],
        "api key": [*BASE, "-u", "2", "--rounds", "1", "--scenarios", "code", "--concurrency", "2",
                    "--sim-args", FAST_SIM, "--csv", "r/locust"],
        **{needle: ["--headless", "-u", "1", *args] for args, needle in BAD_INPUTS},
    }
    refused = {needle for _args, needle in BAD_INPUTS}
    commands = {}
    for name, args in runs.items():
        cwd = work / f"run{len(commands)}"
        cwd.mkdir()
        args = args if name in refused else [*args, "--run-dir", str(cwd / "r")]
        commands[name] = (args, cwd, dict(os.environ, OPENAI_API_KEY=SECRET)) if name == "api key" else (args, cwd)
    return {name: (result, commands[name][1] / "r") for name, result in run_locust_together(commands).items()}


@pytest.mark.processes
def test_two_processes_produce_one_complete_run(short_runs):
    result, run_dir = short_runs["two processes"]
    assert result.returncode == 0, result.stderr[-3000:]
    records = list(read_records(run_dir))
    assert len(records) == 2 + 24
    assert all(r["error"] is None for r in records)
    assert {r["worker"] for r in records} == {0, 1}
    assert "Concurrency" in result.stdout


@pytest.mark.processes
def test_unreachable_host_gives_counted_failures_not_a_crash(short_runs):
    result, run_dir = short_runs["unreachable"]
    assert result.returncode != 0 or "Traceback" not in result.stderr
    assert "Traceback" not in result.stderr
    records = list(read_records(run_dir))
    assert len(records) == 4 + 4
    assert {r["error"] for r in records} == {"connect to 127.0.0.1:9: connection refused"}
    assert "connection refused" in result.stdout


@pytest.mark.processes
@pytest.mark.parametrize("needle", [needle for _args, needle in BAD_INPUTS])
def test_bad_input_is_one_line_and_exit_code_2(short_runs, needle):
    result, _run_dir = short_runs[needle]
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert needle in result.stderr.strip().splitlines()[-1]


@pytest.mark.processes
def test_api_key_never_reaches_a_file(short_runs):
    result, run_dir = short_runs["api key"]
    assert result.returncode == 0, result.stderr[-2000:]
    assert SECRET not in result.stdout and SECRET not in result.stderr
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert len(files) >= 4
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), path


@pytest.mark.processes
def test_a_lost_worker_fails_its_requests_and_the_run_finishes_by_itself(tmp_path):
    import signal
    import time

    import psutil

    from loadlib.run.workers import WORKER_LOST
    from tests.conftest import LOCUSTFILE

    port = str(free_port())
    run_dir = tmp_path / "r"
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *BASE, "-u", "4", "--processes", "2",
               "--rounds", "4", "--scenarios", "", "--concurrency", "2", "--max-tokens", "2048",
               "--master-bind-host", "127.0.0.1", "--master-bind-port", port, "--master-port", port,
               "--run-dir", str(run_dir), "--sim-args", FAST_SIM]
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while not (run_dir / "records.jsonl").exists() or len(list(read_records(run_dir))) < 2:
            assert time.time() < deadline and proc.poll() is None
            time.sleep(0.1)
        os.kill(psutil.Process(proc.pid).children()[0].pid, signal.SIGKILL)
        proc.communicate(timeout=120)  # ends by itself: no round waits for the lost worker
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    records = list(read_records(run_dir))
    lost = [r for r in records if r["error"] == WORKER_LOST]
    assert len(lost) == 1  # the lost worker held one stream of the round under way
    assert len(records) == 2 * 4 * 2  # every assignment has a record: same and different, 4 rounds of 2
    assert WORKER_LOST in (run_dir / "summary.txt").read_text(encoding="utf-8")


@pytest.mark.processes
def test_the_web_ui_binds_loopback_unless_told(tmp_path):
    import time

    from tests.conftest import LOCUSTFILE

    port = str(free_port())
    proc = subprocess.Popen([sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--web-port", port,
                             "--sim-args", FAST_SIM], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 30
        line = ""
        while "Starting web interface" not in line and time.time() < deadline:
            line = proc.stdout.readline()
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert f"Starting web interface at http://127.0.0.1:{port}" in line
