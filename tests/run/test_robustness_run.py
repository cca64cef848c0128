"""A whole run under faults: real headless Locust against a misbehaving server, a server that
restarts mid-run, kill -9 and Ctrl-C of the client mid-run. Nothing crashes, nothing is lost,
every failure is counted with its reason, and failures never enter a figure."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import psutil
import pytest

from loadlib.figures import formulas
from loadlib.records import RECORDS_FILE, RecordJournal, RequestLabel, RequestRecord
from loadlib.report.protocol import cut_short
from loadlib.wire.client import ChatClient, ChatSettings, chat_body
from tests.conftest import LOCUSTFILE, run_locust
from tests.wire.test_robustness_faults import EXPECTED, MODEL, FaultServer

QUIET = ["--headless", "--loglevel", "WARNING"]
SIM_SPEED = ["--time-scale", "0.05"]


def lines_of(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if line.strip()] if path.exists() else []


def journal(run_dir: Path) -> list[dict]:
    """Every line of records.jsonl, each of which must be a whole JSON object."""
    return [orjson.loads(line) for line in lines_of(run_dir / RECORDS_FILE)]


def report(run_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir), *args],
                          capture_output=True, text=True, timeout=60)


def start_locust(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_records(run_dir: Path, count: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while len(lines_of(run_dir / RECORDS_FILE)) < count:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"fewer than {count} records after {timeout} s"
        time.sleep(0.05)


def finished_by(trace: Path, moment: float) -> set[str]:
    """Request ids the simulator had finished sending before `moment` (wall clock)."""
    rows = map(orjson.loads, lines_of(trace))
    return {row["request_id"] for row in rows if row["done_at"] is not None and row["done_at"] < moment}


@pytest.fixture
def sim(tmp_path):
    """A fast simulator that this test starts and stops (a killed Locust cannot stop its own)."""
    from loadlib.sim.process import start_simulator

    trace = tmp_path / "sim-trace.jsonl"
    process = start_simulator([*SIM_SPEED, "--trace", str(trace)])
    try:
        yield process, trace
    finally:
        process.stop()


# --- every fault in one run ----------------------------------------------------------------------

FAULTS = [name for name, reason in EXPECTED.items() if reason is not None]


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory):
    """A 2-user protocol run (4 scenarios, then 2 streams same/different, 6 rounds: 48 requests)
    against a server that answers every other request with the next fault."""
    work = tmp_path_factory.mktemp("faults")
    schedule = [step for fault in FAULTS for step in ("normal", fault)]
    with FaultServer(schedule) as server:
        result = run_locust([*QUIET, "-u", "2", "--rounds", "6", "--concurrency", "2",
                             "--request-timeout", "0.5", "--host", server.url, "--model", MODEL,
                             "--run-dir", str(work / "r"), "--csv", str(work / "r" / "locust")], cwd=work)
    return result, work / "r", dict(server.served)


@pytest.mark.processes
def test_the_run_goes_on_through_every_fault(fault_run):
    result, run_dir, served = fault_run
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode in (0, 1), result.stderr[-3000:]  # 1: Locust saw failures
    records = journal(run_dir)
    assert len(records) == 4 * 6 + 2 * 2 * 6  # every request of the plan has its record
    assert set(FAULTS) <= set(served.values())


@pytest.mark.processes
def test_each_failed_record_carries_the_reason_of_its_fault(fault_run):
    _result, run_dir, served = fault_run
    for record in journal(run_dir):
        assert record["error"] == EXPECTED[served[record["request_id"]]], served[record["request_id"]]
        assert record["sent_at"] > 1e9  # failed requests are placed in time like the others


@pytest.mark.processes
def test_locusts_failure_table_shows_each_reason(fault_run):
    result, run_dir, _served = fault_run
    with open(run_dir / "locust_failures.csv", newline="") as fh:
        errors = [row["Error"] for row in csv.DictReader(fh)]
    for fault in FAULTS:
        assert any(EXPECTED[fault] in error for error in errors), (fault, errors)
    assert "connection reset mid-stream" in result.stdout + result.stderr  # Locust's error report


@pytest.mark.processes
def test_the_summary_and_the_report_count_each_reason_and_exclude_the_failures(fault_run):
    _result, run_dir, _served = fault_run
    records = journal(run_dir)
    failed = [r for r in records if r["error"]]
    summary = (run_dir / "summary.txt").read_text(encoding="utf-8")
    text = report(run_dir)
    assert text.returncode == 0, text.stderr
    for output in (summary, text.stdout):
        assert f"{len(records)} requests, {len(failed)} failed" in output
        for fault in FAULTS:
            assert EXPECTED[fault] in output, fault
    as_json = report(run_dir, "--json")
    assert as_json.returncode == 0, as_json.stderr
    figures = orjson.loads(as_json.stdout)
    counted = {(row["cell"], row["error"]): row["count"] for row in figures["failures"]}
    expected: dict[tuple[str, str], int] = {}
    for r in failed:
        expected[(r["cell"], r["error"])] = expected.get((r["cell"], r["error"]), 0) + 1
    assert counted == expected


@pytest.mark.processes
def test_failed_requests_never_enter_decode_or_aggregate_figures(fault_run):
    _result, run_dir, _served = fault_run
    records = journal(run_dir)
    figures = orjson.loads(report(run_dir, "--json").stdout)
    ok = [r for r in records if r["error"] is None]
    for scenario, row in figures["single"].items():
        mine = [r for r in ok if r["cell"] == "single" and r["scenario"] == scenario]
        decodes = [formulas.decode_tps(r["completion_tokens"], r["ttft_s"], r["total_s"]) for r in mine]
        assert row["n"] == len(mine)
        if mine:
            assert row["decode_tps"] == pytest.approx(sum(decodes) / len(decodes))
    for row in figures["concurrent"]:
        cell = f"c{row['concurrency']}-{row['case']}"
        rounds: dict[int, list[dict]] = {}
        for r in records:
            if r["cell"] == cell:
                rounds.setdefault(r["round"], []).append(r)
        whole = [rs for rs in rounds.values() if all(r["error"] is None for r in rs)]
        assert row["n"] == len(whole)  # a round with a failed stream is left out entirely
        if whole:
            aggregates = [sum(r["completion_tokens"] - 1 for r in rs) / max(r["total_s"] - r["ttft_s"] for r in rs)
                          for rs in whole]
            assert row["aggregate_tps"] == pytest.approx(sum(aggregates) / len(aggregates))


@pytest.mark.processes
def test_the_report_says_how_many_requests_each_figure_excludes(fault_run):
    _result, run_dir, _served = fault_run
    records = journal(run_dir)
    figures = orjson.loads(report(run_dir, "--json").stdout)
    by_scenario = {row["scenario"]: row for row in figures["tables"]["single_stream"]}
    for scenario in ("code", "en_tech", "cn_chat", "cn_essay"):
        mine = [r for r in records if r["cell"] == "single" and r["scenario"] == scenario]
        assert by_scenario[scenario]["failed"] == sum(1 for r in mine if r["error"]), scenario
    for row in figures["tables"]["concurrency"]:
        cell = f"c{row['concurrency']}-{row['case']}"
        bad = {r["round"] for r in records if r["cell"] == cell and r["error"]}
        assert row["failed_rounds"] == len(bad), cell


# --- a server that goes away and comes back ------------------------------------------------------

@pytest.mark.processes
def test_a_server_restart_mid_run_gives_failures_while_down_then_normal_figures(tmp_path):
    from loadlib.sim.process import start_simulator

    first = start_simulator(SIM_SPEED)
    port = first.url.rsplit(":", 1)[1]
    second = None
    run_dir = tmp_path / "r"
    proc = start_locust([*QUIET, "-u", "1", "--rounds", "60", "--max-tokens", "128", "--scenarios", "code",
                         "--concurrency", "", "--host", first.url, "--model", "default", "--run-dir", str(run_dir),
                         "--keep-going"],  # a restart on purpose: without it, a server gone ends the run
                        tmp_path)  # failed rounds go fast while the server is down: plenty of rounds
    try:
        wait_for_records(run_dir, 5, proc)
        os.kill(first.pid, signal.SIGKILL)  # a crash, not a clean shutdown
        first.stop()
        wait_for_records(run_dir, len(lines_of(run_dir / RECORDS_FILE)) + 3, proc)  # failures pile up
        second = start_simulator([*SIM_SPEED, "--port", port])
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for sim in (first, second):
            if sim is not None:
                sim.stop()
    assert "Traceback" not in err, err[-3000:]
    records = sorted(journal(run_dir), key=lambda r: r["sent_at"])
    assert len(records) == 60
    errors = [r["error"] for r in records]
    first_failure = next(i for i, e in enumerate(errors) if e)
    last_failure = max(i for i, e in enumerate(errors) if e)
    down = errors[first_failure:last_failure + 1]
    assert all(e is None for e in errors[:first_failure]) and all(e is None for e in errors[last_failure + 1:])
    assert len(errors) - last_failure - 1 >= 5, errors  # normal requests again after the restart
    assert {e for e in down if e} <= {f"connect to 127.0.0.1:{port}: connection refused",
                                      "connection reset before headers", "connection closed before headers",
                                      "connection reset mid-stream", "connection closed mid-stream"}, down
    decode = [formulas.decode_tps(r["completion_tokens"], r["ttft_s"], r["total_s"]) for r in records if not r["error"]]
    before, after = decode[:first_failure], decode[first_failure:]
    assert sum(after) / len(after) == pytest.approx(sum(before) / len(before), rel=0.25)
    assert "connection refused" in out  # counted in the summary's failure table


# --- nothing lost: kill -9 and Ctrl-C --------------------------------------------------------------

def interrupted_run(tmp_path: Path, url: str, sig: int, after_records: int,
                    timeout: float) -> tuple[Path, float, int, str, str]:
    """A long 2-stream protocol run sent `sig` once `after_records` records are on disk:
    (run dir, when the signal went, exit code, stdout, stderr)."""
    run_dir = tmp_path / "r"
    proc = start_locust([*QUIET, "-u", "2", "--rounds", "50", "--scenarios", "code", "--concurrency", "2",
                         "--host", url, "--model", "default", "--run-dir", str(run_dir)], tmp_path)
    try:
        wait_for_records(run_dir, after_records, proc)
        signalled_at = time.time()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return run_dir, signalled_at, proc.returncode, out, err


@pytest.mark.processes
def test_kill_9_mid_run_keeps_every_finished_request_and_the_report_says_cut_short(tmp_path, sim):
    process, trace = sim
    run_dir, killed_at, _code, _out, _err = interrupted_run(tmp_path, process.url, signal.SIGKILL, 12, timeout=10)
    records = journal(run_dir)  # every line is whole JSON
    assert finished_by(trace, killed_at - 0.3) <= {r["request_id"] for r in records}
    assert not (run_dir / "summary.txt").exists()
    result = report(run_dir)
    assert result.returncode == 0, result.stderr
    assert "CUT SHORT" in result.stdout and f"{len(records)} requests" in result.stdout


@pytest.mark.processes
def test_a_torn_last_line_is_skipped_with_a_warning(tmp_path, sim):
    process, _trace = sim
    run_dir = tmp_path / "r"
    journal_file = RecordJournal(run_dir)
    client = ChatClient(process.url, ChatSettings(model="default"))
    try:
        for i in range(3):
            body = chat_body(client.settings, [{"role": "user", "content": f"Count to {i + 5}."}])
            exchange = client.stream(body, f"r{i}")
            label = RequestLabel("code", "single", "single", round=i)
            journal_file.append(RequestRecord.of(label, exchange, f"r{i}", worker=0, user=0))
    finally:
        client.close()
        journal_file.close()
    whole = lines_of(run_dir / RECORDS_FILE)
    with open(run_dir / RECORDS_FILE, "ab") as fh:  # what a kill in the middle of a write leaves
        fh.write(whole[0][: len(whole[0]) // 2])
    out = report(run_dir)
    assert out.returncode == 0, out.stderr
    assert "torn last line" in out.stderr and "3 requests, 0 failed" in out.stdout


@pytest.mark.processes
def test_kill_9_of_one_worker_keeps_the_finished_requests_and_ctrl_c_ends_the_run(tmp_path, sim):
    process, trace = sim
    run_dir = tmp_path / "r"
    proc = start_locust([*QUIET, "-u", "4", "--processes", "2", "--rounds", "50", "--scenarios", "",
                         "--concurrency", "4", "--host", process.url, "--model", "default",
                         "--request-timeout", "5", "--run-dir", str(run_dir)], tmp_path)
    try:
        wait_for_records(run_dir, 12, proc)  # rounds of 4 streams, 2 on each worker
        workers = psutil.Process(proc.pid).children()
        assert len(workers) == 2
        killed_at = time.time()
        os.kill(workers[0].pid, signal.SIGKILL)
        time.sleep(1.0)  # the other worker goes on
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Locust's own exit path may log ECHILD for the child that is gone: not ours, not a failure
    assert err.count("Traceback") == err.count("ChildProcessError: [Errno 10] No child processes"), err[-3000:]
    records = journal(run_dir)
    assert finished_by(trace, killed_at - 0.3) <= {r["request_id"] for r in records}
    summary = (run_dir / "summary.txt").read_text(encoding="utf-8")
    assert "CUT SHORT" in summary
    result = report(run_dir)
    assert result.returncode == 0 and "CUT SHORT" in result.stdout, result.stderr


@pytest.mark.processes
def test_ctrl_c_ends_the_run_cleanly_with_the_summary_of_what_finished(tmp_path, sim):
    process, trace = sim
    run_dir, stopped_at, code, out, err = interrupted_run(tmp_path, process.url, signal.SIGINT, 10, timeout=20)
    assert code == 0 and "Traceback" not in err, err[-3000:]
    records = journal(run_dir)
    assert finished_by(trace, stopped_at - 0.3) <= {r["request_id"] for r in records}
    summary = (run_dir / "summary.txt").read_text(encoding="utf-8")
    assert f"{len(records)} requests" in summary and "CUT SHORT" in summary and "Single stream" in out
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    assert manifest["ended_at"] and manifest["finished"] is False
    result = report(run_dir)
    assert result.returncode == 0 and "CUT SHORT (stopped before the plan was done)" in result.stdout


def test_the_end_marker_tells_a_finished_run_from_a_cut_one():
    assert cut_short({"ended_at": None}) == "the client never reached the end of the run"
    assert cut_short({"ended_at": "2026-01-01T00:00:00", "finished": False}) == "stopped before the plan was done"
    assert cut_short({"ended_at": "2026-01-01T00:00:00", "finished": True}) is None
    assert cut_short({}) is None  # records from other tools: nothing known
