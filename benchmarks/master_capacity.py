"""How much the master pays per request, now that workers run the load and send records in batches.

Two measurements, printed together:

1. Absorb rate: the master's whole share of one batch of 500 records (Locust's message decoding,
   the journal write, the count and the live window, as `RecordIntake.take_lines` does it), timed
   on this process's CPU clock: master CPU per record and records/s one master core can absorb.
2. A real distributed run: `locust --processes N` with a closed loop of short answers against the
   simulator, the master's and the workers' CPU time read from /proc: master CPU per request and
   the master/worker CPU ratio.

    python benchmarks/master_capacity.py                     # 64 streams, 2 workers, 30 s

Targets (issue 16): >= 20,000 records/s per master core; master CPU <= 10 % of the workers'.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from locust.rpc.protocol import Message

from loadlib.records import Exchange, RequestLabel, RequestRecord, read_records
from loadlib.run.intake import RecordIntake
from loadlib.run.runtime import FLUSH_RECORDS, RECORDS_MESSAGE
from loadlib.sim.process import start_simulator

REPO = Path(__file__).resolve().parent.parent
PROFILE = """
[request]
max_tokens = {max_tokens}
[load]
mode = "closed"
duration_s = {duration_s}
jitter_s = 1.0
[scenarios.distinct-issues]
"""


def absorb_rate(batches: int = 200) -> tuple[float, float]:
    """(master CPU µs per record, records/s per core) for batches of `FLUSH_RECORDS` records."""
    label = RequestLabel("distinct-issues", "closed", "closed", kind="distinct-issues", concurrency=64, slot=17,
                         closed_loop=True)
    exchange = Exchange(max_tokens=32, sent_at=time.time(), ttft_s=0.0123, total_s=0.0456, last_chunk_s=0.0450,
                        completion_tokens=32, prompt_tokens=812, cached_tokens=32, chunks=9, finish_reason="length",
                        http_status=200, output_sha="0123456789abcdef")
    record = RequestRecord.of(label, exchange, "0" * 32, worker=1, user=8)
    lines = b"\n".join(record.to_json() for _ in range(FLUSH_RECORDS))
    wire = Message(RECORDS_MESSAGE, {"lines": lines, "in_flight": 64}, "worker-1").serialize()
    with tempfile.TemporaryDirectory() as work:
        intake = RecordIntake(Path(work), window=5000)
        started = time.process_time()
        for _ in range(batches):
            message = Message.unserialize(wire)
            intake.take_lines(message.data["lines"])
        spent = time.process_time() - started
        intake.close()
    per_record = spent / (batches * FLUSH_RECORDS)
    return per_record * 1e6, 1.0 / per_record


def distributed_run(streams: int, workers: int, seconds: float, max_tokens: int, time_scale: float) -> dict:
    """The master's and the workers' CPU seconds, and the requests, over the steady part of a
    closed-loop run (from 2 s after the first record to 1 s before the planned end: start-up
    imports and the end-of-run summary are the same for any run length, and left out)."""
    work = Path(tempfile.mkdtemp(prefix="master-capacity-"))
    (work / "p.toml").write_text(PROFILE.format(max_tokens=max_tokens, duration_s=seconds))
    sim = start_simulator(["--time-scale", str(time_scale), "--max-running-requests", str(streams)])
    command = [sys.executable, "-m", "locust", "-f", str(REPO / "locustfiles" / "dflash.py"), "--headless",
               "--only-summary", "--loglevel", "WARNING", "-u", str(streams), "--processes", str(workers),
               "--host", sim.url, "--profile", "p.toml", "--run-dir", "run"]
    journal = work / "run" / "records.jsonl"
    samples: list[tuple[float, float, float, int]] = []  # (time, master CPU s, workers CPU s, records)
    try:
        proc = subprocess.Popen(command, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        master = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                children = sum(_cpu(child) for child in master.children())
                samples.append((time.monotonic(), _cpu(master), children, _lines(journal)))
            except psutil.Error:
                pass
            time.sleep(0.25)
    finally:
        sim.stop()
    first = next(t for t, _m, _w, n in samples if n > 0)
    window = [s for s in samples if first + 2.0 <= s[0] <= first + seconds - 1.0]
    (t0, m0, w0, n0), (t1, m1, w1, n1) = window[0], window[-1]
    return {"requests": n1 - n0, "seconds": t1 - t0, "master_cpu_s": m1 - m0, "workers_cpu_s": w1 - w0,
            "total_requests": sum(1 for _ in read_records(work / "run")), "exit": proc.returncode}


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--max-tokens", type=int, default=8, help="short answers: the most requests per second")
    parser.add_argument("--time-scale", type=float, default=0.02)
    args = parser.parse_args()

    per_record_us, per_core = absorb_rate()
    print(f"absorb: master CPU {per_record_us:.1f} us per record in batches of {FLUSH_RECORDS} "
          f"-> {per_core:,.0f} records/s per master core (target >= 20,000)")
    run = distributed_run(args.streams, args.workers, args.seconds, args.max_tokens, args.time_scale)
    ratio = run["master_cpu_s"] / max(run["workers_cpu_s"], 1e-9)
    print(f"run: {args.streams} closed-loop streams, {args.workers} workers, max_tokens {args.max_tokens}, "
          f"{run['total_requests']:,} requests in all, Locust exit {run['exit']}")
    print(f"     steady {run['seconds']:.1f} s: {run['requests']:,} requests ({run['requests'] / run['seconds']:,.0f}/s), "
          f"master CPU {run['master_cpu_s']:.2f} s ({run['master_cpu_s'] / max(run['requests'], 1) * 1e6:.0f} us "
          f"per request), workers CPU {run['workers_cpu_s']:.2f} s, master/workers {ratio:.1%} (target <= 10%)")
    return 0 if per_core >= 20_000 and ratio <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
