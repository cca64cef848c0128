"""Workers on other hosts, on one machine: the master, two workers and the simulator each in a network
namespace of its own, linked by veth pairs to one bridge (as four hosts on one switch). The
protocol and a closed loop run across them: every record reaches the master's journal (Locust's
own count, which travels apart in the workers' reports, agrees), the figures match a one-host run,
the worker whose clock is 30 s ahead (`UNI_LOCUST_TEST_CLOCK`) is measured and corrected, and a
worker host that drops off the network mid-run is reported as a lost worker.

Needs root and `ip` (iproute2); skipped with the reason elsewhere. Every namespace is named after
this process and deleted at the end, whatever happened."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from analysis.compare import compare
from loadlib import clock
from loadlib.records import read_records
from loadlib.run_view import read_run
from tests.analysis.test_compare import DECODE_FIGURES, THROUGHPUT_FIGURES
from tests.conftest import LOCUSTFILE, run_together

pytestmark = pytest.mark.processes

SUBNET = "10.39.0"
ADDRESSES = {"master": 1, "w0": 2, "w1": 3, "sim": 4}
SIM_PORT, MASTER_PORT = 24700, 24701
PROTOCOL = ["--rounds", "3", "--scenarios", "code", "--concurrency", "2", "--max-tokens", "256"]
# A pace at which a request's decode (~0.2 s) outweighs a loaded machine's scheduling noise, for the comparison
SIM_PACE = ["--time-scale", "0.2"]
CLOSED = '[request]\nmax_tokens = 64\n[load]\nmode = "closed"\nduration_s = {duration}\njitter_s = 0.2\n' \
         '[scenarios.distinct-issues]\n'


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` (iproute2) on this machine"
    probe = f"u39p{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"cannot make a network namespace here: {getattr(exc, 'stderr', '') or exc}".strip()
    _ip("netns", "del", probe)
    return None


class Hosts:
    """The namespaces, named `u39<pid><role>`; `run(role, command)` starts a command in one."""

    def __init__(self) -> None:
        self.tag = f"u39{os.getpid() % 100000}"
        self.hub = f"{self.tag}hub"
        self.made: list[str] = []

    def ns(self, role: str) -> str:
        return f"{self.tag}{role}"

    def address(self, role: str) -> str:
        return f"{SUBNET}.{ADDRESSES[role]}"

    def link(self, role: str) -> str:
        return f"{self.tag}{role}a"  # this host's end of its veth (at most 15 characters)

    def make(self) -> None:
        _ip("netns", "add", self.hub)
        self.made.append(self.hub)
        self.exec(self.hub, "ip", "link", "add", "br0", "type", "bridge")
        self.exec(self.hub, "ip", "link", "set", "br0", "up")
        for role in ADDRESSES:
            ns, here, there = self.ns(role), self.link(role), f"{self.tag}{role}b"
            _ip("netns", "add", ns)
            self.made.append(ns)
            _ip("link", "add", here, "type", "veth", "peer", "name", there)
            _ip("link", "set", here, "netns", ns)
            _ip("link", "set", there, "netns", self.hub)
            self.exec(self.hub, "ip", "link", "set", there, "master", "br0", "up")
            self.exec(ns, "ip", "addr", "add", f"{self.address(role)}/24", "dev", here)
            self.exec(ns, "ip", "link", "set", here, "up")
            self.exec(ns, "ip", "link", "set", "lo", "up")

    def exec(self, ns: str, *command: str) -> None:
        _ip("netns", "exec", ns, *command)

    def remove(self) -> None:
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)

    def command(self, role: str, *command: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(role), *command]


def _locust(*args: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--loglevel", "WARNING", *args]


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    made = Hosts()
    sim = None
    try:
        made.make()
        sim = subprocess.Popen(made.command("sim", sys.executable, "-m", "loadlib.sim", "--host", made.address("sim"),
                                            "--port", str(SIM_PORT), *SIM_PACE),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 30
        while subprocess.run(made.command("master", sys.executable, "-c", _REACH, made.address("sim"), str(SIM_PORT)),
                             capture_output=True, timeout=10).returncode != 0:
            assert sim.poll() is None and time.time() < deadline, "the simulator never answered across the bridge"
            time.sleep(0.2)
        yield made
    finally:
        if sim is not None and sim.poll() is None:
            os.killpg(sim.pid, signal.SIGKILL)
            sim.wait()
        made.remove()


_REACH = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()"


def _across(hosts: Hosts, work: Path, master_args: list[str], clocks: dict[str, str]) -> dict[str, tuple]:
    """name -> (command, cwd, env) for a master in its namespace and a worker in each of the others."""
    url = f"http://{hosts.address('sim')}:{SIM_PORT}"
    runs = {"master": (hosts.command("master", *_locust(
        "--headless", "--master", "--master-bind-host", hosts.address("master"), "--master-bind-port", str(MASTER_PORT),
        "--expect-workers", "2", "--host", url, "--run-dir", str(work / "r"), "--csv", str(work / "locust"),
        *master_args)), work, dict(os.environ))}
    for role in ("w0", "w1"):
        runs[role] = (hosts.command(role, *_locust("--worker", "--master-host", hosts.address("master"),
                                                   "--master-port", str(MASTER_PORT))), work,
                      {**os.environ, clock.TEST_CLOCK_ENV: clocks.get(role, "")})
    return runs


@pytest.fixture(scope="module")
def protocol(hosts, tmp_path_factory):
    """The protocol across the hosts (worker w0's clock 30 s ahead) and, at the same time, on this host
    alone with two worker processes: (across run directory, its master, one-host run directory, the
    test's true start and end)."""
    work = tmp_path_factory.mktemp("netns-protocol")
    (work / "across").mkdir()
    (work / "alone").mkdir()
    runs = _across(hosts, work / "across", ["-u", "2", *PROTOCOL], {"w0": "30"})
    runs["alone"] = (_locust("--headless", "--processes", "2", "-u", "2", *PROTOCOL, "--run-dir",
                             str(work / "alone" / "one-host"), "--sim-args", " ".join(SIM_PACE)), work / "alone", dict(os.environ))
    began = time.time()
    done = run_together(runs, timeout=120)
    assert done["alone"].returncode == 0, done["alone"].stderr[-3000:]
    return work / "across", done["master"], work / "alone" / "one-host", (began, time.time())


def test_across_hosts_every_record_reaches_the_master_and_locust_counts_the_same(protocol):
    work, master, _alone, _window = protocol
    assert master.returncode == 0, master.stderr[-3000:]
    records = list(read_records(work / "r"))
    measured = [r for r in records if r["measured"]]
    assert len(measured) == 3 + 3 * 2 * 2 and all(r["error"] is None for r in measured)
    assert {r["worker"] for r in measured} == {0, 1}
    [total] = [row for row in csv.DictReader(open(work / "locust_stats.csv")) if row["Name"] == "Aggregated"]
    assert int(total["Request Count"]) == len(records)  # Locust's count came in the workers' own reports


def test_across_hosts_the_shifted_worker_is_corrected_and_rounds_start_together(protocol):
    work, _master, _alone, (began, ended) = protocol
    entries = json.loads((work / "r" / "manifest.json").read_text())["clock_offsets"]
    [ahead] = [e for e in entries if e["offset_s"] < -1]
    assert abs(ahead["offset_s"] + 30.0) <= ahead["uncertainty_s"] + 0.002, ahead
    records = [r for r in read_records(work / "r") if r["measured"]]
    assert all(began <= r["sent_at"] <= ended for r in records)  # uncorrected, 30 s ahead
    for cell in ("c2-same", "c2-different"):
        for index in range(3):
            sent = [r["sent_at"] for r in records if r["cell"] == cell and r["round"] == index]
            assert len(sent) == 2 and max(sent) - min(sent) < 0.05, (cell, index, sent)
    checks = [c for c in read_run(work / "r").checks if c.name == "clocks"]
    assert checks and all(c.ok is True for c in checks), checks


def test_across_hosts_the_figures_match_a_run_on_one_host(protocol):
    work, _master, alone, _window = protocol
    across, one_host = read_run(work / "r"), read_run(alone)
    for cell in ("single", "c2-same", "c2-different"):
        a, b = (run.records[run.records["cell"] == cell] for run in (across, one_host))
        assert (a["completion_tokens"].sum(), len(a)) == (b["completion_tokens"].sum(), len(b)), cell
    verdicts = next(s for s in compare([one_host, across]).sections if s.key == "verdicts").data.set_index("figure")
    for figure in (*DECODE_FIGURES, *THROUGHPUT_FIGURES):  # compare's judgement of noise, as for a run against itself
        assert verdicts.loc[figure, "verdict"] == "not distinguishable", (figure, verdicts.loc[figure].to_dict())


def test_a_closed_loop_across_hosts_reports_a_worker_host_that_drops_off_the_network(hosts, tmp_path):
    (tmp_path / "p.toml").write_text(CLOSED.format(duration=10))
    runs = _across(hosts, tmp_path, ["-u", "4", "--profile", "p.toml"], {})
    started = {name: subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, start_new_session=True) for name, (command, cwd, env) in runs.items()}
    try:
        deadline = time.time() + 60
        while not (tmp_path / "r" / "records.jsonl").exists() or len(list(read_records(tmp_path / "r"))) < 8:
            assert started["master"].poll() is None and time.time() < deadline, started["master"].stderr.read()[-3000:]
            time.sleep(0.2)
        hosts.exec(hosts.ns("w1"), "ip", "link", "set", hosts.link("w1"), "down")  # the host is gone
        _out, err = started["master"].communicate(timeout=90)
    finally:
        for proc in started.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert "Traceback" not in err, err[-3000:]
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    [lost] = manifest["lost_workers"]
    [w1] = [e for e in manifest["clock_offsets"] if e["worker"] == lost["worker"]]
    assert lost["users"] >= 1 and w1["measurements"] >= 1
    summary = (tmp_path / "r" / "summary.txt").read_text(encoding="utf-8")
    assert "WORKERS LOST: 1 worker process" in summary, summary
    records = list(read_records(tmp_path / "r"))
    assert [r for r in records if r["worker"] == 0 and r["measured"]]  # the other worker carried on
