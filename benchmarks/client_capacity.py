"""Fidelity and capacity of the client: the tool against the simulator at 8, 64 and 256 streams.

For each point it runs this tool's protocol (one Locust process, `--concurrency N`) against a
fresh simulator on the other core, then joins every record with the simulator's own trace by
request id (`X-Request-Id`) and prints: achieved chunks/s while streams were active, the client's
CPU share and CPU microseconds per chunk, the client's TTFT and decode errors against the
simulator's send times, and the client's resident memory when the point's streams start and end.

    python benchmarks/client_capacity.py [--points 8,64,256,64x1x1024,256x1x4096] [--rounds 2]
    python benchmarks/client_capacity.py --points 64,64x1x1024 --chunk-times both   # its cost: off, then on

`--chunk-times on` runs the tool with `--chunk-times` (each record keeps its gaps between chunks),
`both` runs each point without it and then with it, so the two rows show what it costs: CPU us/chunk
and the journal's bytes per chunk; and, since a whole run's CPU varies more than that cost on a
shared machine, the stream reader alone in this process, off and on (`reader_cost`).

A point is `STREAMS` (speculative chunks of the preset, `--max-tokens` answers) or
`STREAMSxTOKENS_PER_CHUNKxANSWER_TOKENS` (e.g. `256x1x4096`: 256 streams, one token per chunk as
vLLM and llama.cpp send without speculative decoding, 4096-token answers).

Targets for one worker process: at 8 streams TTFT error p99 < 1 ms and decode error < 0.3%;
at 64 streams >= 40,000 chunks/s with TTFT error p99 < 2 ms (and decode error p99 <= 0.3% with
one token per chunk); at 256 streams >= 20,000 chunks/s with TTFT error p99 < 1 ms; resident
memory flat across the 256 x 4096 point. The simulator's step time is set per point
(--time-scale) so that it offers more chunks than the target.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from loadlib.figures import formulas  # noqa: E402
from loadlib.records import chunk_gaps_text, read_records  # noqa: E402
from loadlib.wire.sse import StreamReader  # noqa: E402
from loadlib.sim.process import READY_PREFIX, SimulatorProcess, start_simulator  # noqa: E402

# Simulator time scale per point. At 8 streams (fidelity) decode lasts about half a second; at
# 64 and 256 (capacity) verify steps are short enough that the simulator offers more chunks/s
# than the targets (a batch of B streams takes 25.9 + 3.8 (B - 1) ms before scaling, one chunk
# per stream per step).
TIME_SCALES = {8: 0.1, 64: 0.004, 256: 0.008}

# The preset's answers end by themselves after 1088..2111 tokens; a long-answer point makes them
# end at max_tokens instead (the simulator has no flag for it, so a wrapper sets the preset).
_LONG_SIMULATOR = """
import sys
from loadlib.sim import __main__ as cli, presets
answer = int(sys.argv.pop(1))
preset = presets.PRESETS[presets.DEFAULT_PRESET]
presets.PRESETS[presets.DEFAULT_PRESET] = preset.with_overrides(natural_base=answer, natural_span=1)
sys.exit(cli.main(sys.argv[1:]))
"""


@dataclass(frozen=True)
class Point:
    """One measurement: streams, tokens per chunk (None: the preset's speculative chunks) and
    answer length in tokens."""

    streams: int
    tokens_per_chunk: int | None
    answer_tokens: int

    @classmethod
    def parse(cls, text: str, max_tokens: int) -> "Point":
        parts = [int(p) for p in text.lower().split("x")]
        if len(parts) == 1:
            return cls(parts[0], None, max_tokens)
        if len(parts) == 3:
            return cls(*parts)
        raise SystemExit(f"bad point {text!r}: expected STREAMS or STREAMSxTOKENS_PER_CHUNKxANSWER_TOKENS")

    @property
    def name(self) -> str:
        if self.tokens_per_chunk is None:
            return f"{self.streams} streams, spec chunks x {self.answer_tokens}"
        return f"{self.streams} streams x {self.tokens_per_chunk} tok/chunk x {self.answer_tokens}"


def start_point_simulator(point: Point, sim_args: list[str]) -> SimulatorProcess:
    """The simulator for a point: the plain one, or for fixed-length answers the wrapper."""
    if point.tokens_per_chunk is None:
        return start_simulator(sim_args)
    args = [*sim_args, "--port", "0", "--speculative-num-draft-tokens", str(point.tokens_per_chunk)]
    proc = subprocess.Popen([sys.executable, "-c", _LONG_SIMULATOR, str(point.answer_tokens), *args],
                            stdout=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    line = proc.stdout.readline().decode()
    if not line.startswith(READY_PREFIX):
        proc.kill()
        raise SystemExit(f"simulator did not start for {point.name}: {line!r}")
    return SimulatorProcess(proc, [line[len(READY_PREFIX):].strip()], None)


def run_point(point: Point, rounds: int, time_scale: float, work: Path, chunk_times: bool = False) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"{point.streams}-{point.tokens_per_chunk}-{point.answer_tokens}-", dir=work))
    trace = work / "trace.jsonl"
    run_dir = work / "run"
    streams = point.streams
    sim_args = ["--time-scale", str(time_scale), "--trace", str(trace),
                "--max-running-requests", str(max(streams, 2))]
    with start_point_simulator(point, sim_args) as sim:
        command = [sys.executable, "-m", "locust", "-f", str(REPO / "locustfiles" / "dflash.py"),
                   "--headless", "-u", str(streams), "--concurrency", str(streams), "--scenarios", "",
                   "--host", sim.url, "--model", "sim", "--rounds", str(rounds),
                   "--max-tokens", str(point.answer_tokens), "--run-dir", str(run_dir),
                   "--loglevel", "WARNING", "--only-summary", *(["--chunk-times"] if chunk_times else [])]
        proc = subprocess.Popen(command, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        samples = sample_process(proc)
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"locust failed at {point.name}:\n{err.decode()[-2000:]}")
        sim_ps = psutil.Process(sim.pid)
        sim_cpu = sim_ps.cpu_times()
    records = pd.DataFrame(list(read_records(run_dir)))
    sim_rows = pd.DataFrame([orjson.loads(line) for line in trace.read_bytes().splitlines()])
    row = summarize(point, records, sim_rows, samples, sim_cpu.user + sim_cpu.system)
    journal_bytes = (run_dir / "records.jsonl").stat().st_size
    return {"point": row.pop("point"), "chunk times": "on" if chunk_times else "off", **row,
            "journal B/chunk": journal_bytes / max(float(records["chunks"].sum()), 1.0)}


def reader_cost(chunks_per_request: int = 1024, requests: int = 100, repeats: int = 5) -> dict:
    """CPU microseconds per chunk of the stream reader alone (`StreamReader.feed`, one chunk a read,
    vLLM's one-token chunks), without and with `--chunk-times` (its stamps, and the record's
    `chunk_gaps_ms` made once a request), best of `repeats`."""
    piece = b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok "}}]}\n\n'
    arrivals = [1_700_000_000.0 + i * 0.02 for i in range(chunks_per_request)]
    costs = {}
    for kept in (False, True):
        best = float("inf")
        for _ in range(repeats):
            started = time.process_time()
            for _ in range(requests):
                reader = StreamReader(chunk_times=kept)
                for t in arrivals:
                    reader.feed(piece, t)
                if kept:
                    chunk_gaps_text(reader.chunk_times)
            best = min(best, time.process_time() - started)
        costs["on" if kept else "off"] = best / (requests * chunks_per_request) * 1e6
    return costs


def sample_process(proc: subprocess.Popen) -> pd.DataFrame:
    """(wall time, CPU seconds, resident MB) of the Locust process every 50 ms until it exits."""
    ps = psutil.Process(proc.pid)
    rows = []
    while proc.poll() is None:
        try:
            with ps.oneshot():
                cpu, rss = ps.cpu_times(), ps.memory_info().rss
        except psutil.NoSuchProcess:
            break
        rows.append((time.time(), cpu.user + cpu.system, rss / 2**20))
        time.sleep(0.05)
    return pd.DataFrame(rows, columns=["t", "cpu", "rss_mb"])


def summarize(point: Point, records: pd.DataFrame, sim: pd.DataFrame, cpu: pd.DataFrame,
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
    client_decode = formulas.decode_tps(joined["completion_tokens"], joined["ttft_s"], joined["total_s"])
    sim_decode = formulas.decode_tps(joined["completion_tokens_sim"], joined["first_token_at"], joined["done_at"])
    decode_err = (client_decode / sim_decode - 1.0).abs() * 100.0
    return {
        "point": point.name,
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
        "RSS start MB": _rss_at(cpu, float(windows["start"].min())),
        "RSS end MB": _rss_at(cpu, float(windows["end"].max())),
    }


def _cpu_between(cpu: pd.DataFrame, start: float, end: float) -> float:
    """CPU seconds used in [start, end], interpolated from the samples."""
    values = np.interp([start, end], cpu["t"], cpu["cpu"])
    return float(values[1] - values[0])


def _rss_at(samples: pd.DataFrame, t: float) -> float:
    """The client's resident memory (MB) at the sample nearest to time t."""
    return float(samples["rss_mb"].iloc[(samples["t"] - t).abs().argmin()])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default="8,64,256,64x1x1024,256x1x4096",
                        help="STREAMS or STREAMSxTOKENS_PER_CHUNKxANSWER_TOKENS, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=1024, help="answer tokens of STREAMS points")
    parser.add_argument("--time-scale", type=float, default=None, help="override the per-point time scale")
    parser.add_argument("--chunk-times", choices=("off", "on", "both"), default="off",
                        help="run the tool with --chunk-times, without it, or both one after the other (its cost)")
    args = parser.parse_args()
    kept = {"off": (False,), "on": (True,), "both": (False, True)}[args.chunk_times]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for point in (Point.parse(p, args.max_tokens) for p in args.points.split(",")):
            scale = args.time_scale or TIME_SCALES.get(point.streams, 0.01)
            for chunk_times in kept:
                rows.append(run_point(point, args.rounds, scale, Path(tmp), chunk_times))
                print(pd.DataFrame([rows[-1]]).to_string(index=False, float_format=lambda v: f"{v:,.2f}"),
                      flush=True)
    print("\nAll points:")
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    if args.chunk_times == "both":
        cost = reader_cost()
        print(f"\nStream reader alone, CPU us per chunk: --chunk-times off {cost['off']:.3f}, on {cost['on']:.3f} "
              f"({cost['on'] / cost['off'] - 1:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
