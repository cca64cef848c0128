"""Fidelity and capacity of the client: the tool against the simulator at 8, 64 and 256 streams.

For each point it runs this tool's protocol (one Locust process, `--concurrency N`) against a
fresh simulator on the other core, then joins every record with the simulator's own trace by
request id (`X-Request-Id`) and prints: achieved chunks/s while streams were active, the client's
CPU share and CPU microseconds per chunk, and the client's TTFT and decode errors against the
simulator's send times.

    python benchmarks/client_capacity.py [--points 8,64,256] [--rounds 2] [--max-tokens 1024]

Targets for one worker process: at 8 streams TTFT error p99 < 1 ms and decode error < 0.3%;
at 64 streams >= 40,000 chunks/s with TTFT error p99 < 2 ms; at 256 streams >= 20,000 chunks/s
with TTFT error p99 < 2 ms. The simulator's step time is set per point (--time-scale) so that it
offers more chunks than the target; the simulator's own lag is printed to show it kept up.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from loadlib import metrics  # noqa: E402
from loadlib.records import read_records  # noqa: E402
from loadlib.sim.process import start_simulator  # noqa: E402

# Simulator time scale per point. At 8 streams (fidelity) decode lasts about half a second; at
# 64 and 256 (capacity) verify steps are short enough that the simulator offers more chunks/s
# than the targets (a batch of B streams takes 25.9 + 3.8 (B - 1) ms before scaling).
TIME_SCALES = {8: 0.1, 64: 0.004, 256: 0.01}


def run_point(streams: int, rounds: int, max_tokens: int, time_scale: float, work: Path) -> dict:
    trace = work / f"trace-{streams}.jsonl"
    run_dir = work / f"run-{streams}"
    sim_args = ["--time-scale", str(time_scale), "--trace", str(trace),
                "--max-running-requests", str(max(streams, 2))]
    with start_simulator(sim_args) as sim:
        command = [sys.executable, "-m", "locust", "-f", str(REPO / "locustfiles" / "dflash.py"),
                   "--headless", "-u", str(streams), "--concurrency", str(streams), "--scenarios", "",
                   "--host", sim.url, "--model", "sim", "--rounds", str(rounds),
                   "--max-tokens", str(max_tokens), "--run-dir", str(run_dir), "--loglevel", "WARNING",
                   "--only-summary"]
        proc = subprocess.Popen(command, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        cpu_samples = sample_cpu(proc)
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"locust failed at {streams} streams:\n{err.decode()[-2000:]}")
        sim_ps = psutil.Process(sim.pid)
        sim_cpu = sim_ps.cpu_times()
    records = pd.DataFrame(list(read_records(run_dir)))
    sim_rows = pd.DataFrame([orjson.loads(line) for line in trace.read_bytes().splitlines()])
    return summarize(streams, records, sim_rows, cpu_samples, sim_cpu.user + sim_cpu.system)


def sample_cpu(proc: subprocess.Popen) -> pd.DataFrame:
    """(wall time, CPU seconds) of the Locust process every 50 ms until it exits."""
    ps = psutil.Process(proc.pid)
    rows = []
    while proc.poll() is None:
        try:
            cpu = ps.cpu_times()
        except psutil.NoSuchProcess:
            break
        rows.append((time.time(), cpu.user + cpu.system))
        time.sleep(0.05)
    return pd.DataFrame(rows, columns=["t", "cpu"])


def summarize(streams: int, records: pd.DataFrame, sim: pd.DataFrame, cpu: pd.DataFrame,
              sim_cpu_s: float) -> dict:
    ok = records[records["error"].isna()]
    joined = ok.merge(sim, on="request_id", suffixes=("", "_sim"))
    ends = joined["sent_at"] + joined["total_s"]
    # Active windows: each round from its first send to its last end.
    joined["end"] = ends
    windows = joined.groupby(["cell", "round"]).agg(start=("sent_at", "min"), end=("end", "max"))
    active_s = float((windows["end"] - windows["start"]).sum())
    chunks = float(joined["chunks"].sum())
    cpu_used = sum(_cpu_between(cpu, row.start, row.end) for row in windows.itertuples())
    sim_ttft = joined["first_token_at"] - joined["received_at"]
    ttft_err_ms = (joined["ttft_s"] - sim_ttft) * 1000.0
    client_decode = metrics.decode_tps(joined["completion_tokens"], joined["ttft_s"], joined["total_s"])
    sim_decode = metrics.decode_tps(joined["completion_tokens_sim"], joined["first_token_at"], joined["done_at"])
    decode_err = (client_decode / sim_decode - 1.0).abs() * 100.0
    return {
        "streams": streams,
        "requests": len(records),
        "failed": int(records["error"].notna().sum()),
        "chunks/s": chunks / active_s,
        "client CPU share": cpu_used / active_s,
        "CPU us/chunk": cpu_used / chunks * 1e6,
        "TTFT err p50 ms": float(np.percentile(ttft_err_ms, 50)),
        "TTFT err p99 ms": float(np.percentile(ttft_err_ms, 99)),
        "TTFT err max ms": float(ttft_err_ms.max()),
        "decode err mean %": float(decode_err.mean()),
        "decode err p99 %": float(np.percentile(decode_err, 99)),
        "sim CPU s": sim_cpu_s,
    }


def _cpu_between(cpu: pd.DataFrame, start: float, end: float) -> float:
    """CPU seconds used in [start, end], interpolated from the samples."""
    values = np.interp([start, end], cpu["t"], cpu["cpu"])
    return float(values[1] - values[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default="8,64,256", help="stream counts")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--time-scale", type=float, default=None, help="override the per-point time scale")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for streams in (int(p) for p in args.points.split(",")):
            scale = args.time_scale or TIME_SCALES.get(streams, 0.01)
            rows.append(run_point(streams, args.rounds, args.max_tokens, scale, Path(tmp)))
            print(pd.DataFrame([rows[-1]]).to_string(index=False, float_format=lambda v: f"{v:,.2f}"),
                  flush=True)
    print("\nAll points:")
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
