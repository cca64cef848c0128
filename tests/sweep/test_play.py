"""A sweep as the web UI sees it: its plan holds every configuration's cells, a capacity search's
levels included as the search finds them, so the tab's count of cells is the run's."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import LOCUSTFILE, TINY_SEARCH, free_port

SIM = "python -m loadlib.sim --host 127.0.0.1 --port {port} --time-scale 0.05"
SEARCH_SWEEP = TINY_SEARCH + f"""
[server]
command = "{SIM} --max-running-requests {{mrr}}"
ready_timeout_s = 20
[server.grid]
mrr = [1, 2]
"""


@pytest.mark.processes
def test_the_web_ui_counts_every_level_of_each_configurations_search(tmp_path):
    (tmp_path / "sweep.toml").write_text(SEARCH_SWEEP)
    port, run_dir = free_port(), tmp_path / "r"
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--autostart", "-u", "2", "--profile",
               str(tmp_path / "sweep.toml"), "--web-host", "127.0.0.1", "--web-port", str(port),
               "--run-dir", str(run_dir), "--loglevel", "WARNING"]
    locust = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "summary.txt").exists():
            assert locust.poll() is None and time.monotonic() < deadline, locust.stderr.read().decode()[-3000:]
            time.sleep(0.3)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/uni/figures.json", timeout=10) as reply:
            view = json.load(reply)
    finally:
        locust.terminate()
        locust.wait(timeout=30)
    rows = json.loads((run_dir / "manifest.json").read_text())["sweep"]
    levels = sum(len(row["search"]["levels"]) for row in rows)
    assert [row["status"] for row in rows] == ["ok", "ok"] and levels >= 4, rows
    assert view["phase"].startswith(f"Finished: all {levels} cells done"), view["phase"]
    assert len(view["rows"]) == levels
