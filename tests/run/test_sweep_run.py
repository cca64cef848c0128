"""Server sweeps end to end: real headless Locust with a profile's `[server]`, each configuration's
server (the built-in simulator) started by the tool, its load run against it, the server stopped;
bad configurations are rows, the sweep goes on, and no server outlives the tool."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from loadlib.records import read_records
from tests.conftest import LOCUSTFILE, TINY_ROUNDS, TINY_SEARCH, free_port, run_locust

SIM = "{python} -m loadlib.sim --host 127.0.0.1 --port {port} --time-scale {ts}"
DFLASH = "--mem-fraction-static {mem} --speculative-num-draft-tokens 8 --speculative-dflash-block-size {block}"
SWEEP = TINY_ROUNDS + f"""
[server]
command = "timeout -s KILL {{life}} {SIM} {DFLASH}"
ready_timeout_s = 20
stop_grace_s = 2
[[server.configs]]
label = "fast"
values = {{ ts = 0.05, life = 600, mem = 0.94, block = 8 }}
[[server.configs]]
label = "broken"
values = {{ ts = "nope", life = 600, mem = 0.9, block = 8 }}
[[server.configs]]
label = "mismatch"
values = {{ ts = 0.05, life = 600, mem = 0.9, block = 4 }}
[[server.configs]]
label = "dies"
values = {{ ts = 3.0, life = 4, mem = 0.9, block = 8 }}
[[server.configs]]
label = "after"
values = {{ ts = 0.05, life = 600, mem = 0.9, block = 8 }}
"""
SLOW = TINY_ROUNDS + f"""
[server]
command = "{SIM}"
ready_timeout_s = 20
[[server.configs]]
label = "slow"
values = {{ ts = 3.0 }}
"""


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    work = tmp_path_factory.mktemp("sweep")
    (work / "sweep.toml").write_text(SWEEP)
    result = run_locust(["--headless", "-u", "2", "--processes", "2", "--profile", str(work / "sweep.toml"),
                         "--run-dir", str(work / "r"), "--loglevel", "WARNING"], cwd=work)
    report = subprocess.run([sys.executable, "-m", "analysis", "report", str(work / "r"), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    manifest = json.loads((work / "r" / "manifest.json").read_text())
    return result, manifest, json.loads(report.stdout), work / "r"


@pytest.mark.processes
def test_bad_configurations_are_rows_and_the_sweep_goes_on(sweep):
    result, manifest, report, _run_dir = sweep
    assert result.returncode == 1, result.stderr[-3000:]  # Locust's exit code: requests failed (the dying server's)
    rows = {row["label"]: row for row in manifest["sweep"]}
    assert [row["label"] for row in manifest["sweep"]] == ["fast", "broken", "mismatch", "dies", "after"]
    assert [rows[label]["status"] for label in rows] == ["ok", "exited", "exited", "died", "ok"]
    assert any("--time-scale" in line for line in rows["broken"]["log_tail"]), rows["broken"]["log_tail"]
    # what SGLang refuses, the simulator refuses with its message: a row that did not serve
    assert rows["mismatch"]["log_tail"][-1] == (
        "ValueError: Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but they "
        "differ. For DFLASH they must match. speculative_num_draft_tokens=8, speculative_dflash_block_size=4.")
    assert rows["dies"]["returncode"] in (-9, 137)  # SIGKILLed (by `timeout`) during its load
    assert [(row["label"], row["status"]) for row in report["sweep"]] == \
        [(label, rows[label]["status"]) for label in rows]


@pytest.mark.processes
def test_each_configuration_keeps_its_label_and_workers_share_its_load(sweep):
    _result, _manifest, report, run_dir = sweep
    records = list(read_records(run_dir))
    measured = [r for r in records if r["measured"]]
    for label in ("fast", "after"):
        own = [r for r in measured if r["target"] == label]
        assert len(own) == 2 + 2 * 2 * 2 and not any(r["error"] for r in own)  # single x2, c2 x2 cells x2 rounds
        assert {r["worker"] for r in own} == {0, 1}
    assert not any(r["target"] in ("broken", "mismatch") for r in records)
    assert {row["run_b"] for row in report["verdicts"]} == {"after"}  # against fast; a dead server is not judged


@pytest.mark.processes
def test_the_summary_has_the_sweep_table_and_no_server_outlives_the_run(sweep):
    result, manifest, _report, run_dir = sweep
    summary = (run_dir / "summary.txt").read_text()
    assert "Server sweep (one row per configuration" in summary and "Configurations that did not serve" in summary
    assert "Verdicts against fast" in result.stdout
    assert sorted(p.name for p in (run_dir / "servers").iterdir()) == ["after.log", "broken.log", "dies.log", "fast.log",
                                                                        "mismatch.log"]
    for row in manifest["sweep"]:
        assert row["pid"] is None or not _running(row["pid"]), row


@pytest.mark.processes
def test_a_known_performance_warning_in_a_servers_log_is_in_its_row(sweep):
    """--mem-fraction-static 0.94 leaves the DFLASH draft's CUDA graph no room (the thread's line,
    which the simulator logs too): the row of that configuration says so, the others do not."""
    result, manifest, report, run_dir = sweep
    flagged = "SGLang: DFLASH draft CUDA graph off: only 0.93 GB free (lower --mem-fraction-static)"
    rows = {row["label"]: row for row in manifest["sweep"]}
    assert rows["fast"]["warnings"] == [flagged] and rows["after"]["warnings"] == []
    assert {row["label"]: row["warnings"] for row in report["sweep"]}["fast"] == [flagged]
    table = (run_dir / "summary.txt").read_text().split("Server sweep (")[1].split("\n\n")[0].splitlines()
    assert table[1].split()[-1] == "warnings"
    assert table[2].startswith("  fast ") and table[2].endswith(flagged)
    assert next(line for line in table if line.startswith("  after ")).endswith(" -")
    assert f"sweep: fast: {flagged}" in result.stderr


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _server_of(tool: subprocess.Popen, timeout_s: float = 30.0) -> psutil.Process:
    """The simulator the tool started (a child of the tool's process)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in psutil.Process(tool.pid).children(recursive=True):
            try:
                if "loadlib.sim" in " ".join(child.cmdline()) and "--time-scale" in child.cmdline():
                    return child
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.2)
    raise AssertionError("the tool never started its server")


@pytest.mark.processes
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_server_ends_with_the_tool(tmp_path, sig):
    (tmp_path / "slow.toml").write_text(SLOW)
    tool = subprocess.Popen([sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "2",
                             "--profile", str(tmp_path / "slow.toml"), "--run-dir", str(tmp_path / "r")],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        server = _server_of(tool)
        deadline = time.monotonic() + 20
        journal = tmp_path / "r" / "records.jsonl"
        while not (journal.exists() and journal.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.2)  # its load has begun: the first request's record is in
        tool.send_signal(sig)
        output, _ = tool.communicate(timeout=30)
        server.wait(timeout=10)  # raises if the server is still there
        assert not _running(server.pid)
        if sig == signal.SIGTERM:  # as Ctrl-C: the summary names the configuration cut short
            manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
            assert manifest["sweep"][0]["label"] == "slow" and manifest["sweep"][0]["status"] == "stopped", output
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.wait()


SEARCH_SWEEP = TINY_SEARCH + f"""
[server]
command = "{SIM} --max-running-requests {{mrr}}"
ready_timeout_s = 20
[server.grid]
ts = [0.05]
mrr = [1, 2]
"""


@pytest.mark.processes
def test_a_capacity_search_per_configuration_and_the_web_ui_counts_its_levels(tmp_path):
    """Each configuration its own search; the web UI (the run started by --autostart) ends counting
    every level of both searches as a cell, as the search found them."""
    (tmp_path / "search.toml").write_text(SEARCH_SWEEP)
    port, run_dir = free_port(), tmp_path / "r"
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--autostart", "--autoquit", "3", "-u", "2",
               "--profile", str(tmp_path / "search.toml"), "--web-host", "127.0.0.1", "--web-port", str(port),
               "--run-dir", str(run_dir), "--loglevel", "WARNING"]
    tool = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "summary.txt").exists():
            assert tool.poll() is None and time.monotonic() < deadline, tool.stderr.read()[-3000:]
            time.sleep(0.3)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/uni/figures.json", timeout=10) as reply:
            view = json.load(reply)
        stdout, stderr = tool.communicate(timeout=60)
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.wait()
    assert tool.returncode == 0, stderr[-3000:]
    rows = json.loads((run_dir / "manifest.json").read_text())["sweep"]
    assert [row["label"] for row in rows] == ["ts=0.05,mrr=1", "ts=0.05,mrr=2"]
    for row in rows:  # each its own search, both levels measured on its own server (a loose SLO: both hold)
        assert row["status"] == "ok" and row["search"]["best"] == 2, row.get("search")
    records = [r for r in read_records(run_dir) if r["measured"]]
    for row in rows:
        cells = {r["cell"] for r in records if r["target"] == row["label"] and not r["error"]}
        assert {"search-u1", "search-u2"} <= cells, (row["label"], cells)
    assert "2 users (" in stdout  # the sweep table's capacity column
    levels = sum(len(row["search"]["levels"]) for row in rows)
    assert view["phase"].startswith(f"Finished: all {levels} cells done"), view["phase"]
    assert len(view["rows"]) == levels


FLUSHING_SWEEP = f"""
[request]
max_tokens = 8
[load]
mode = "rounds"
rounds = 1
[scenarios.long-context]
sizes = [2000]
[server]
command = "{SIM}"
ready_timeout_s = 20
[server.grid]
ts = [0.01, 0.02]
"""


@pytest.mark.processes
def test_the_manifest_counts_the_cache_flushes_of_each_configurations_mode(tmp_path):
    """The sweep flushes each server before its load; the long-context cells flush before each
    request: the manifest counts both."""
    (tmp_path / "flush.toml").write_text(FLUSHING_SWEEP)
    result = run_locust(["--headless", "-u", "1", "--profile", str(tmp_path / "flush.toml"),
                         "--run-dir", str(tmp_path / "r"), "--loglevel", "WARNING"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    cold = [r for r in read_records(tmp_path / "r") if r["measured"] and r["cache_intended"] == "cold"]
    assert len(cold) == 2 and all(r["cached_tokens"] == 0 for r in cold)
    assert manifest["cache_flushes"] == {"flushed": 2 + len(cold)}
