"""Locust's own model and options through real headless runs against the time-scaled simulator:
the README's own locustfile with -u -r -t --csv, one request event per request, -t and SIGTERM
ending runs with their summary, Locust's failure ratio equal to the records'."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request

import orjson
import pandas as pd
import pytest

from loadlib.records import read_records
from tests.conftest import FAST_SIM, LOCUSTFILE, REPO, free_port, run_together

README = (REPO / "README.md").read_text(encoding="utf-8")


def readme_locustfile() -> str:
    """The one ```python block of the README's "Your own locustfile" section."""
    section = README.split("## Your own locustfile", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1 and "@task" in blocks[0]
    return blocks[0]


CLOSED_LONG = """
[request]
max_tokens = 32
[load]
mode = "closed"
duration_s = 120
jitter_s = 0.2
[scenarios.protocol]
"""

FAULTY = """
[request]
max_tokens = 32
[load]
mode = "closed"
duration_s = 4
jitter_s = 0.2
[scenarios.protocol]
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The module's headless runs, started together (each in its own directory, name -> (result,
    directory)): the README's locustfile with -u -r -t --csv --html, a long closed profile and the
    rounds protocol cut by -t, and a closed profile on a simulator failing 30 % of its requests
    in one process and in two."""
    work = tmp_path_factory.mktemp("native")
    dirs = {name: work / str(name) for name in ("readme", "t_closed", "t_rounds", 1, 2)}
    for path in dirs.values():
        path.mkdir()
    (dirs["readme"] / "mylocust.py").write_text(readme_locustfile(), encoding="utf-8")
    (dirs["t_closed"] / "p.toml").write_text(CLOSED_LONG, encoding="utf-8")
    own = [sys.executable, "-m", "locust", "-f"]
    commands = {
        "readme": ([*own, "mylocust.py", "--headless", "-u", "6", "-r", "6", "-t", "8s", "--csv", "own",
                    "--html", "own.html", "--run-dir", "run", "--sim-args", FAST_SIM, "--loglevel", "WARNING"]),
        "t_closed": ([*own, str(LOCUSTFILE), "--headless", "-u", "3", "-t", "4s", "--profile", "p.toml",
                      "--run-dir", "run", "--sim-args", FAST_SIM]),
        "t_rounds": ([*own, str(LOCUSTFILE), "--headless", "-u", "2", "-t", "2s", "--rounds", "20",
                      "--run-dir", "run", "--sim-args", "--time-scale 0.2"]),
    }
    for processes in (1, 2):
        (dirs[processes] / "p.toml").write_text(FAULTY, encoding="utf-8")
        distributed = []
        if processes > 1:
            port = str(free_port())
            distributed = ["--processes", str(processes), "--master-bind-host", "127.0.0.1",
                           "--master-bind-port", port, "--master-port", port]
        commands[processes] = [*own, str(LOCUSTFILE), "--headless", "-u", "4", "--profile", "p.toml", "--csv", "out",
                               "--run-dir", "run", "--sim-args", f"{FAST_SIM} --fault http500@0.3", *distributed]
    results = run_together({name: (command, dirs[name]) for name, command in commands.items()}, timeout=120)
    return {name: (result, dirs[name]) for name, result in results.items()}


@pytest.mark.processes
def test_readme_locustfile_runs_with_u_r_t_and_csv_one_request_event_per_request(runs):
    code = readme_locustfile()
    assert len([line for line in code.splitlines() if line.strip()]) <= 15
    result, tmp_path = runs["readme"]
    assert (tmp_path / "mylocust.py").read_text(encoding="utf-8") == code
    elapsed = result.elapsed_s
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert 8 <= elapsed < 35  # -t ends it, with its summary
    records = list(read_records(tmp_path / "run"))
    stats = pd.read_csv(tmp_path / "own_stats.csv")
    aggregated = stats[stats["Name"] == "Aggregated"].iloc[0]
    assert aggregated["Request Count"] == len(records) > 8
    rows = stats[stats["Name"] != "Aggregated"]
    assert rows["Name"].is_unique and set(rows["Type"]) == {"POST"}  # one request type per name
    assert {"short", "explain", "radix-hit"} <= set(rows["Name"])
    by_name = pd.DataFrame(records).groupby("scenario").size()
    for row in rows.itertuples():
        assert by_name[row.Name] == row._3  # Request Count per name, as the records count them
    ours = pd.read_csv(tmp_path / "own_llm.csv").set_index("Name")
    assert ours.loc["short", "Requests"] == by_name["short"]
    assert 0 < ours.loc["short", "TTFT p50 ms"] < ours.loc["short", "TTFT p99 ms"] + 1e-9
    assert "uni-bench summary: locust run" in result.stdout and "CUT SHORT" not in result.stdout
    html = (tmp_path / "own.html").read_text(encoding="utf-8")
    assert "LLM figures (uni-bench)" in html and "uni-bench summary: locust run" in html
    report = subprocess.run([sys.executable, "-m", "analysis", "report", str(tmp_path / "run")],
                            capture_output=True, text=True, timeout=60)
    assert report.returncode == 0 and "short" in report.stdout
    # its users start no cells: the scrapes frame the whole run, and the server's counts are checked over it
    assert "no /metrics" not in result.stdout
    checks = orjson.loads(subprocess.run([sys.executable, "-m", "analysis", "report", str(tmp_path / "run"), "--json"],
                                         capture_output=True, text=True, timeout=60).stdout)["tables"]["validity"]
    counted = {c["name"]: c for c in checks if c["cell"] == "whole run"}
    assert counted["tokens"]["ok"] is True and counted["requests"]["ok"] is True, counted


@pytest.mark.processes
def test_t_ends_a_free_running_profile_on_time_with_its_summary(runs):
    result, tmp_path = runs["t_closed"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.elapsed_s < 25
    manifest = orjson.loads((tmp_path / "run" / "manifest.json").read_bytes())
    assert manifest["cut_short"].startswith("-t/--run-time 4 s") and manifest["finished"] is False
    assert "uni-bench summary: closed run" in result.stdout and "CUT SHORT" in result.stdout
    assert len(list(read_records(tmp_path / "run"))) > 10


@pytest.mark.processes
def test_t_cuts_the_rounds_protocol_short_and_the_summary_says_so(runs):
    result, tmp_path = runs["t_rounds"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "CUT SHORT" in result.stdout
    manifest = orjson.loads((tmp_path / "run" / "manifest.json").read_bytes())
    assert manifest["finished"] is False and manifest["cut_short"].startswith("-t/--run-time")


@pytest.mark.processes
def test_sigterm_ends_a_run_like_ctrl_c_with_its_summary_and_the_simulator_stopped(tmp_path):
    """Sent twice, as `timeout` and a supervisor may both send it: the second one waits for the
    end the first began (no traceback, the summary and the columnar copy written)."""
    (tmp_path / "p.toml").write_text(CLOSED_LONG, encoding="utf-8")
    process = subprocess.Popen([sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "2",
                                "--profile", "p.toml", "--run-dir", "run", "--sim-args", FAST_SIM],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list(read_records(tmp_path / "run")) if (tmp_path / "run" / "records.jsonl").exists() else True:
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert "uni-bench summary" in stdout and "Traceback" not in stderr, stderr[-3000:]
    assert (tmp_path / "run" / "summary.txt").exists() and (tmp_path / "run" / "records.parquet").exists()
    url = orjson.loads((tmp_path / "run" / "manifest.json").read_bytes())["target"]["url"]
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/health", timeout=2)


@pytest.mark.processes
@pytest.mark.parametrize("processes", [1, 2])
def test_locust_failure_ratio_equals_the_records_failure_share(runs, processes):
    result, tmp_path = runs[processes]
    assert result.returncode in (0, 1), result.stderr[-3000:]  # 1: Locust's exit code on request failures
    records = pd.DataFrame(list(read_records(tmp_path / "run")))
    stats = pd.read_csv(tmp_path / "out_stats.csv")
    aggregated = stats[stats["Name"] == "Aggregated"].iloc[0]
    assert aggregated["Request Count"] == len(records)
    assert aggregated["Failure Count"] == records["error"].notna().sum() > 0
    share = records["error"].notna().mean()
    assert 0.15 < share < 0.45
