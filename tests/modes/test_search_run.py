"""The capacity search through real headless Locust against the time-scaled simulator with two
running requests at most: a third stream queues, so an SLO on TTFT that queueing breaks puts the
capacity at 2 streams; the result, with its moving-block resample shares, the requests/s delivered
and Little's law, reaches the manifest, the summary, the report and its plot."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loadlib.figures.capacity import judged_requests, level_block, level_seed
from loadlib.figures.formulas import meets_slo
from loadlib.figures.goodput import Slo
from loadlib.figures.slo_resamples import SHARDS
from loadlib.modes.search import judge
from loadlib.record_table import records_frame
from loadlib.records import read_records
from tests.conftest import FAST_SIM, free_port, run_locust_together
from tests.profile_runs import run_profiles_together

QUEUEING_SIM = f"{FAST_SIM} --max-running-requests 2"
# TTFT p90 at 2 streams: 0.05-0.09 s, its bootstrap's 95th percentile up to 0.130 s with three searches on 2 cores;
# at 3 streams (one queued behind a 768-token answer): 0.18-0.23 s, its 5th percentile down to 0.152 s (18 runs).
USERS_SLO_S = 0.14

USERS_SEARCH = """
[request]
max_tokens = 768
[load]
mode = "search"
variable = "users"
duration_s = 2
warmup_s = 0.3
jitter_s = 0.1
[scenarios.distinct-issues]
[slo]
ttft_s = {slo}
ttft_p = 90
""".format(slo=USERS_SLO_S)


def report_json(run_dir) -> dict:
    out = subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir), "--json"], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def search_runs(tmp_path_factory):
    """The users search in one and in two processes and the rate search, started together (each on
    its own simulator): name -> (result, every record, run directory)."""
    port = str(free_port())
    two = ["--processes", "2", "--master-bind-host", "127.0.0.1", "--master-bind-port", port, "--master-port", port]
    work = {name: tmp_path_factory.mktemp(name) for name in ("users1", "users2", "rate")}
    done = run_profiles_together({"users1": (work["users1"], USERS_SEARCH, 8),
                                  "users2": (work["users2"], USERS_SEARCH, 8, *two),
                                  "rate": (work["rate"], RATE_SEARCH, 32)}, sim=QUEUEING_SIM)
    return {name: (result, df, work[name] / "run") for name, (result, df) in done.items()}


@pytest.mark.processes
@pytest.mark.parametrize("processes", [1, 2])
def test_a_users_search_finds_the_two_streams_the_server_runs_at_once(search_runs, processes):
    result, df, run_dir = search_runs[f"users{processes}"]
    report = report_json(run_dir)
    search = report["search"]
    assert search["variable"] == "users" and search["best"] == 2 and search["bracket"] == [2, 3]
    levels = {level["value"]: level for level in search["levels"]}
    assert list(levels) == [1, 2, 4, 3]  # doubling until the SLO broke, then the bisection
    assert levels[2]["verdict"] == "held" and levels[3]["verdict"] == "broke"
    assert levels[2]["ttft_s"] <= USERS_SLO_S < levels[3]["ttft_s"]
    measured = df[df["measured"]]
    # a cell per run of a level: one that came out too close to call runs again ("search-u2-r2")
    cells = {cell: value for value, level in levels.items() for cell in level["cells"]}
    assert set(measured["cell"]) == set(cells)
    assert all(cell == f"search-u{value}" or cell.startswith(f"search-u{value}-r") for cell, value in cells.items())
    for level in levels.values():  # judged on its own records, every run of it
        assert level["runs"] == len(level["cells"]) <= 2
        assert level["n"] == measured["cell"].isin(level["cells"]).sum()
    assert measured.groupby("cell")["slot"].nunique().to_dict() == cells
    frame = records_frame(read_records(run_dir))
    slo = Slo(ttft_s=USERS_SLO_S, ttft_p=90)
    for level in levels.values():  # the live judgement, its resamples drawn by the workers or here: the records' own
        again = judge(frame[frame["cell"].isin(level["cells"])], slo, level_seed(level["cells"]))
        assert (again.n, again.pass_share, again.ttft_low, again.ttft_high) == (
            level["n"], level["pass_share"], level["ttft_low"], level["ttft_high"])
    if processes > 1:
        assert set(measured["worker"]) == {0, 1}
        manifest = json.loads((run_dir / "manifest.json").read_text())
        master = next(watch for watch in manifest["client_watch"] if watch.get("role") == "master")
        runs = sum(level["runs"] for level in levels.values())
        assert master["resample_shards_drawn"] == {"workers": SHARDS * runs, "master": 0}
    table = {row["value"]: row for row in report["tables"]["search"]}  # the report's figures per level
    # the moving-block resamples agree with the verdicts (less firmly at a level that was once too close to call)
    held_share = 0.9 if levels[2]["runs"] == 1 else 0.5
    assert table[2]["pass_share_blocks"] >= held_share and table[3]["pass_share_blocks"] <= 1 - held_share
    level_two = frame[frame["cell"].isin(levels[2]["cells"])].sort_values("sent_at", kind="stable")
    ok, ttft, decode = judged_requests(level_two)  # the block its requests in send order need
    assert table[2]["block"] == level_block(ttft, decode, meets_slo(ok, ttft, decode, USERS_SLO_S, None))
    for value, row in table.items():  # closed loop: Little's law weighs the level's users
        seconds = 2 * levels[value]["runs"]  # each run's duration_s
        assert row["delivered_rps"] == pytest.approx(levels[value]["n"] / seconds, rel=0.35)
        assert row["little_in_flight"] == value and row["little_gap"] == pytest.approx(
            row["little_rate_rps"] * row["latency_s"] / value - 1)
    line = next(line for line in result.stdout.splitlines() if line.startswith("Capacity search"))
    assert line.startswith("Capacity search over closed-loop users: holds at 2 users, "
                           f"{table[2]['delivered_rps']:.2f} req/s delivered (SLO met in ")
    assert f"breaks at 3 users, {table[3]['delivered_rps']:.2f} req/s delivered" in line and "Little's law: " in line


RATE_SEARCH = """
[request]
max_tokens = 256
[load]
mode = "search"
variable = "rate"
start = 8
max_rate = 64
precision = 0.25
duration_s = 2
warmup_s = 0.3
[scenarios.distinct-issues]
[slo]
ttft_s = 0.15
ttft_p = 90
decode_tps = 1000
decode_p = 90
"""


@pytest.mark.processes
def test_a_rate_search_brackets_the_arrival_rate_the_server_holds_and_plots_it(search_runs, tmp_path):
    """Open loop: at 32 req/s the queue grows without bound, at 8 it does not."""
    result, df, run_dir = search_runs["rate"]
    report = report_json(run_dir)
    search = report["search"]
    levels = {level["value"]: level for level in search["levels"]}
    assert list(levels)[:3] == [8, 16, 32] or list(levels)[:2] == [8, 16]
    assert levels[8]["verdict"] == "held" and levels[32 if 32 in levels else 16]["verdict"] != "held"
    good, bad = search["bracket"]
    assert 8 <= good < bad <= 32 and bad - good <= 0.25 * good
    measured = df[df["measured"]]
    for level in levels.values():  # each level's arrivals at its rate
        cell = measured[measured["cell"] == level["cell"]]
        assert len(cell) == pytest.approx(level["value"] * 2, abs=1)
    table = {row["value"]: row for row in report["tables"]["search"]}
    assert table[8]["little_holds"] and table[8]["delivered_rps"] == pytest.approx(8, rel=0.15)
    if 32 in table:  # the arrivals outran the server: 32 req/s x the latency is far above the mean in flight
        assert table[32]["little_gap"] > 0.1 and not table[32]["little_holds"] and table[32]["delivered_rps"] < 28
    assert f"holds at {good:g} req/s: delivered {table[good]['delivered_rps']:.2f} req/s of {good:g} offered (" \
        in result.stdout
    plots = subprocess.run([sys.executable, "-m", "analysis", "plot", str(run_dir), "--out",
                            str(tmp_path / "plots")], capture_output=True, text=True, check=True)
    assert "search_run.png" in plots.stdout and (tmp_path / "plots" / "search_run.png").stat().st_size > 10_000


# The example: a server that runs 8 requests at once, 2 free users to send the arrivals (so the client sends
# ~25 req/s at most, ~17 on 2 busy cores), TTFT p90 within 0.3 s. A rate search judged TTFT from the send, and it held
# at 64 req/s offered while the arrivals waited 10 s for a user. One level each, well below and well above what 2 users
# send.
CLIENT_BOUND_SIM = "--time-scale 0.05 --max-running-requests 8"
CLIENT_BOUND_SEARCH = """
[request]
max_tokens = 256
[load]
mode = "search"
variable = "rate"
start = {rate}
max_rate = {rate}
duration_s = {duration}
warmup_s = 0.3
[scenarios.distinct-issues]
[slo]
ttft_s = 0.3
ttft_p = 90
"""


@pytest.mark.processes
def test_a_rate_the_client_cannot_send_breaks_on_what_its_requests_waited_and_delivered(tmp_path):
    """2 users offered 48 req/s for 2 s, twice what they send on an idle machine: the arrivals wait for
    a free user, so TTFT from the intended send is a second or more while TTFT from the send stays
    short; the level kept pace with what 2 users send (2 over their latency), short of the 48
    offered, and breaks. Offered 6 req/s for 4 s (24 requests: thirds of 8, enough for the medians'
    intervals) it holds and delivers 6."""
    done = run_profiles_together({rate: (tmp_path / str(rate), CLIENT_BOUND_SEARCH.format(rate=rate, duration=duration),
                                         2) for rate, duration in ((6, 4), (48, 2))}, sim=CLIENT_BOUND_SIM)
    (slow_result, _slow_df), (fast_result, fast_df) = done[6], done[48]
    fast = report_json(tmp_path / "48" / "run")
    (level,) = fast["search"]["levels"]
    (row,) = fast["tables"]["search"]
    measured = fast_df[fast_df["measured"] & fast_df["error"].isna()]
    assert level["verdict"] == "broke" and fast["search"]["best"] is None and level["ttft_from"] == "intended_send"
    assert level["ttft_s"] > 0.6 and level["ttft_s"] > 3 * measured["ttft_s"].quantile(0.9)  # from the send: short
    assert measured["queue_s"].quantile(0.9) > 0.6
    users_send_rps = 2 / measured["total_s"].mean()  # two users, each busy from send to end
    assert level["delivered_rps"] == pytest.approx(users_send_rps, rel=0.25) and level["delivered_high"] < 40
    assert row["short"] and row["delivered_rps"] == pytest.approx(level["delivered_rps"], rel=1e-9)  # as judged live
    assert row["latency_last_s"] > row["latency_middle_s"] + 0.3  # the queue grew through the level
    assert (f"breaks at 48 req/s: delivered {level['delivered_rps']:.2f} req/s of 48 offered ("
            in fast_result.stdout) and "; short of it: latency from the intended send " in fast_result.stdout
    slow = report_json(tmp_path / "6" / "run")
    (level,) = slow["search"]["levels"]
    (row,) = slow["tables"]["search"]
    assert level["verdict"] == "held" and level["ttft_from"] == "intended_send" and level["ttft_s"] < 0.3
    assert not row["short"] and level["delivered_low"] < 6 < level["delivered_high"]
    assert level["delivered_rps"] == pytest.approx(6, rel=0.1) and "short" not in level["reason"]
    assert "held at the top (max_rate 6 req/s)" in slow_result.stdout


BAD_TABLES = [  # the profile's [slo] (and [load]) tables, what the last stderr line must say
    ("[slo]\nttft_s = 1\nttft_pct = 90\n", "slo.ttft_pct: unknown key"),
    ("[slo]\nttft_p = 90\n", "slo: ttft_p needs ttft_s"),
    ("[slo]\nttft_s = 1\n", "slo: the search mode judges levels by ttft_p"),
    ('[slo]\nttft_s = 1\nttft_p = 90\n[load]\nmode = "search"\nvariable = "users"\nduration_s = 1\nmax_rate = 4\n',
     "load.max_rate: only for variable = \"rate\""),
]


@pytest.fixture(scope="module")
def bad_table_runs(tmp_path_factory):
    """A run of each bad profile, started together: needle -> (result, profile)."""
    work = tmp_path_factory.mktemp("bad")
    runs = {}
    for table, needle in BAD_TABLES:
        load = '' if "[load]" in table else '[load]\nmode = "search"\nvariable = "users"\nduration_s = 1\n'
        cwd = work / f"case{len(runs)}"
        cwd.mkdir()
        (cwd / "bad.toml").write_text(f"{load}{table}[scenarios.protocol]\n", encoding="utf-8")
        runs[needle] = (["--headless", "-u", "2", "--profile", str(cwd / "bad.toml")], cwd)
    results = run_locust_together(runs, timeout=60)
    return {needle: (results[needle], cwd / "bad.toml") for needle, (_args, cwd) in runs.items()}


@pytest.mark.processes
@pytest.mark.parametrize("needle", [needle for _table, needle in BAD_TABLES])
def test_bad_search_or_slo_keys_stop_the_run_with_one_line_and_exit_code_2(bad_table_runs, needle):
    result, profile = bad_table_runs[needle]
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {profile}: ") and needle in last
