"""How much the master pays per request, now that workers run the load and send records in batches.

Two measurements, printed together:

1. Absorb rate: the master's whole share of one batch of 500 records (Locust's message decoding,
   the journal write, the count and the live window, as `RecordIntake.take_lines` does it), timed
   on this process's CPU clock: master CPU per record and records/s one master core can absorb.
2. Real distributed runs, one per free-running mode (closed, ladder, open, trace, search):
   `locust --processes N` sending short answers to the simulator, the master's and the workers'
   CPU time read from /proc over the steady part: master CPU per request and the master/worker
   CPU ratio. The open and trace modes send `--rate` requests/s; the others run `--streams`.

    python benchmarks/master_capacity.py                          # 64 streams, 8 workers, 20 s a mode
    python benchmarks/master_capacity.py --modes closed --workers 2

Targets (issues 16, 39): >= 20,000 records/s per master core; master CPU <= 10 % of the workers'
in every mode.
"""

from __future__ import annotations

import argparse
import shutil
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
LOADS = {  # mode -> its [load] table for a run of `seconds` at `streams` streams or `rate` requests/s
    "closed": 'mode = "closed"\nduration_s = {seconds}\njitter_s = 1.0',
    "ladder": 'mode = "ladder"\nduration_s = {third}\nlevels = [{quarter}, {half}, {streams}]\njitter_s = 0.5',
    "open": 'mode = "open"\nrate_rps = {rate}\nduration_s = {seconds}',
    "trace": 'mode = "trace"\ntrace = "trace.jsonl"',
    "search": 'mode = "search"\nvariable = "users"\nstart = {quarter}\nstep = 2\nduration_s = {third}',
}
PROFILE = """
seed = 1
[request]
max_tokens = {max_tokens}
[load]
{load}
{scenarios}
[slo]
ttft_s = 60.0
ttft_p = 90
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


def distributed_run(mode: str, streams: int, rate: float, workers: int, seconds: float, max_tokens: int,
                    time_scale: float) -> dict:
    """The master's and the workers' CPU seconds, and the requests, over the steady part of a
    run of `mode` (from 2 s after the first record to 1 s before the planned end: start-up
    imports and the end-of-run summary are the same for any run length, and left out)."""
    work = Path(tempfile.mkdtemp(prefix="master-capacity-"))
    load = LOADS[mode].format(seconds=seconds, third=seconds / 3, quarter=max(streams // 4, 1),
                              half=max(streams // 2, 1), streams=streams, rate=rate)
    scenarios = "" if mode == "trace" else "[scenarios.distinct-issues]"  # a trace brings its own prompts
    (work / "p.toml").write_text(PROFILE.format(max_tokens=max_tokens, load=load, scenarios=scenarios))
    (work / "trace.jsonl").write_text("".join(
        f'{{"timestamp_s": {i / rate:.4f}, "input_tokens": 600, "output_tokens": {max_tokens}}}\n'
        for i in range(int(seconds * rate))))
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
    try:
        first = next(t for t, _m, _w, n in samples if n > 0)
        window = [s for s in samples if first + 2.0 <= s[0] <= first + seconds - 1.0]
        (t0, m0, w0, n0), (t1, m1, w1, n1) = window[0], window[-1]
        return {"requests": n1 - n0, "seconds": t1 - t0, "master_cpu_s": m1 - m0, "workers_cpu_s": w1 - w0,
                "total_requests": sum(1 for _ in read_records(work / "run")), "exit": proc.returncode}
    finally:
        shutil.rmtree(work, ignore_errors=True)


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
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0, help="per mode")
    parser.add_argument("--rate", type=float, default=300.0, help="requests/s of the open and trace modes")
    parser.add_argument("--modes", default=",".join(LOADS), help="comma-separated, of " + ", ".join(LOADS))
    parser.add_argument("--max-tokens", type=int, default=8, help="short answers: the most requests per second")
    parser.add_argument("--time-scale", type=float, default=0.02)
    args = parser.parse_args()

    per_record_us, per_core = absorb_rate()
    print(f"absorb: master CPU {per_record_us:.1f} us per record in batches of {FLUSH_RECORDS} "
          f"-> {per_core:,.0f} records/s per master core (target >= 20,000)")
    ratios = []
    for mode in args.modes.split(","):
        run = distributed_run(mode, args.streams, args.rate, args.workers, args.seconds, args.max_tokens,
                              args.time_scale)
        ratios.append(ratio := run["master_cpu_s"] / max(run["workers_cpu_s"], 1e-9))
        load = f"{args.rate:g} req/s" if mode in ("open", "trace") else f"{args.streams} streams"
        print(f"{mode:>6}: {load}, {args.workers} workers, {run['total_requests']:,} requests, Locust exit "
              f"{run['exit']}; steady {run['seconds']:.1f} s: {run['requests'] / run['seconds']:,.0f} req/s, "
              f"master {run['master_cpu_s'] / max(run['requests'], 1) * 1e6:.1f} us/request, "
              f"workers {run['workers_cpu_s'] / max(run['requests'], 1) * 1e6:.0f} us/request, "
              f"master/workers {ratio:.1%} (target <= 10%)")
    return 0 if per_core >= 20_000 and max(ratios) <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
