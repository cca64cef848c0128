"""Bad input stops the run before it starts: one line naming the input, exit code 2, no traceback.

Complements tests/test_protocol_run.py (zero rounds, a bad concurrency list, --thinking, an
unknown scenario, a host without a scheme) and tests/test_profiles.py (broken profiles). The cases are independent, so they start together
and each test reads its own result.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import LOCUSTFILE, free_port

CASES = {  # name -> (arguments, what the last stderr line must name)
    "negative rounds": (["--rounds", "-1"], "--rounds"),
    "negative request timeout": (["--request-timeout", "-5"], "--request-timeout"),
    "zero users": (["-u", "0"], "-u/--users"),
    "host with a bad port": (["--host", "http://127.0.0.1:99999"], "--host"),
    "run dir holding a run": (["--run-dir", "{tmp}/old-run"], "--run-dir {tmp}/old-run"),
    "run dir that is a file": (["--run-dir", "{tmp}/a-file"], "--run-dir {tmp}/a-file"),
    "run dir that cannot be made": (["--run-dir", "/proc/no-such/run"], "--run-dir /proc/no-such/run"),
    "missing profile": (["--profile", "{tmp}/none.toml"], "{tmp}/none.toml"),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, subprocess.CompletedProcess[str]]:
    tmp = tmp_path_factory.mktemp("input")
    (tmp / "old-run").mkdir()
    (tmp / "old-run" / "records.jsonl").write_text('{"request_id": "x"}\n')
    (tmp / "a-file").write_text("not a directory\n")
    started = {}
    for name, (args, _needle) in CASES.items():
        command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "1",
                   *(arg.format(tmp=tmp) for arg in args)]
        started[name] = subprocess.Popen(command, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)
    results = {}
    for name, proc in started.items():
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # a bad input that starts a run anyway: stop it, fail below
            proc.kill()
            out, err = proc.communicate()
        results[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err.replace(str(tmp), "{tmp}"))
    return results


@pytest.mark.processes
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_naming_it_and_exit_code_2(outcomes, case):
    result = outcomes[case]
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert CASES[case][1] in last, last


@pytest.mark.processes
def test_a_refused_run_dir_is_left_as_it_was(outcomes, tmp_path_factory):
    assert outcomes["run dir holding a run"].returncode == 2
    old = Path(outcomes["run dir holding a run"].args[-1])
    assert sorted(p.name for p in old.iterdir()) == ["records.jsonl"]


@pytest.mark.processes
def test_a_bad_profile_with_processes_takes_the_forked_workers_with_it(tmp_path):
    # Locust forks --processes' workers before the profile is read: they must not outlive the refusal
    (tmp_path / "p.toml").write_text('[load]\nmode = "search"\nvariable = "users"\nstep = 1\nduration_s = 1\n'
                                     "[scenarios.distinct-issues]\n[slo]\nttft_s = 1.0\nttft_p = 90\n")
    run_dir = tmp_path / "refused"  # in every process's command line
    port = str(free_port())
    result = subprocess.run([sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "2",
                             "--processes", "2", "--master-bind-host", "127.0.0.1", "--master-bind-port", port,
                             "--master-port", port, "--profile", "p.toml", "--run-dir", str(run_dir)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        "error: p.toml: load.step: Input should be greater than 1"]
    for _ in range(50):  # killed at once; bounded wait for the kernel to reap them
        left = [p.pid for p in psutil.process_iter(["cmdline", "status"])
                if str(run_dir) in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]
        if not left:
            break
        time.sleep(0.1)
    assert left == []
