"""Soak: many streams for a long time against the simulator; does the client stay flat?

Starts the simulator, then headless Locust with a closed-loop profile (every user sends its next
request as soon as the last one ended) over a mix of scenarios, and samples the Locust process's
resident memory. At the end it prints the request count, the failures by reason (injected faults
are the explained ones), and the client's memory at the start (once every user streams) and at
the end.

    python benchmarks/soak.py                              # 64 streams, 10 minutes
    python benchmarks/soak.py --minutes 3 --fault http503@0.01 --fault drop@0.005

With `--processes N` the load runs on N worker processes and the memory sampled is the master's
(the process that receives every record), e.g. the 100,000-request check of issue 16:

    python benchmarks/soak.py --processes 2 --max-tokens 8 --time-scale 0.005 --minutes 6

Targets: memory growth at most 50 MB (issue 5) and flat, whatever the request count, since the
journal on disk is the record of truth and the master keeps only a bounded window (issue 16: a few
MB); zero unexplained failures. The growth per record is printed too.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from loadlib.sim.process import start_simulator

REPO = Path(__file__).resolve().parent.parent
TARGET_GROWTH_MB = 50.0
WARMUP_S = 30.0  # the start figure is taken this long after Locust starts
PROFILE = """\
description = "Soak: closed loop over a mix of scenarios"
seed = 5

[request]
max_tokens = {max_tokens}

[load]
mode = "closed"
duration_s = {duration_s}
jitter_s = 2.0

[scenarios.radix-hit]
weight = 2

[scenarios.distinct-issues]
weight = 2

[scenarios.multi-turn]
weight = 1
"""
# what the simulator's injected faults look like in records (see loadlib/sim/faults.py)
FAULT_REASONS = {
    "http500": "http 500", "http503": "http 503", "http429": "http 429", "too_long": "http 400",
    "error_event": "stream error", "drop": "connection closed mid-stream", "malformed": "malformed JSON",
    "no_usage": "no usage chunk", "no_done": "without [DONE]", "stall_first": "timeout", "stall": "timeout",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=64, help="concurrent streams (Locust users)")
    parser.add_argument("--minutes", type=float, default=10.0, help="measured duration")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--time-scale", type=float, default=0.1,
                        help="simulator time scale (default 0.1: ten times the preset's real speed, "
                             "so the client handles ten times the records)")
    parser.add_argument("--fault", action="append", default=[], metavar="KIND[=VALUE][@SHARE]",
                        help="inject simulator faults (their failures count as explained)")
    parser.add_argument("--run-dir", default="", help="keep the run here (default: a temporary directory)")
    parser.add_argument("--processes", type=int, default=0,
                        help="worker processes (Locust's --processes); the master's memory is sampled")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="soak-"))
    run_dir = Path(args.run_dir) if args.run_dir else work / "run"
    profile = work / "soak.toml"
    profile.write_text(PROFILE.format(max_tokens=args.max_tokens, duration_s=args.minutes * 60))
    sim_args = ["--time-scale", str(args.time_scale), "--max-running-requests", str(args.streams)]
    for spec in args.fault:
        sim_args += ["--fault", spec]
    sim = start_simulator(sim_args)
    print(f"simulator {sim.url} ({' '.join(sim_args)}); run directory {run_dir}", flush=True)
    command = [sys.executable, "-m", "locust", "-f", str(REPO / "locustfiles" / "dflash.py"), "--headless",
               "--only-summary", "--loglevel", "WARNING", "-u", str(args.streams), "--host", sim.url,
               "--profile", str(profile), "--run-dir", str(run_dir), "--request-timeout", "120"]
    if args.processes:
        command += ["--processes", str(args.processes)]
    log = open(work / "locust.log", "w")
    proc = subprocess.Popen(command, cwd=work, stdout=log, stderr=subprocess.STDOUT)
    samples: list[tuple[float, float, int]] = []  # (s since start, RSS MB, records so far)
    started = time.monotonic()
    try:
        me = psutil.Process(proc.pid)
        while proc.poll() is None:
            time.sleep(5.0)
            try:
                rss = me.memory_info().rss / 2**20
            except psutil.NoSuchProcess:
                break
            if not rss:  # exited (a zombie has no memory)
                break
            samples.append((time.monotonic() - started, rss, _count_lines(run_dir / "records.jsonl")))
            if len(samples) % 12 == 0:
                t, mb, n = samples[-1]
                print(f"  {t:6.0f} s  {n:7d} records  client RSS {mb:7.1f} MB", flush=True)
        proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        proc.wait()
    finally:
        sim.stop()
        log.close()
    return report(args, run_dir, samples, proc.returncode, work / "locust.log")


def report(args: argparse.Namespace, run_dir: Path, samples: list[tuple[float, float, int]], code: int,
           log: Path) -> int:
    records = [json.loads(line) for line in open(run_dir / "records.jsonl", "rb") if line.strip()]
    measured = [r for r in records if r.get("measured", True)]
    reasons = collections.Counter(r["error"] for r in records if r["error"])
    injected = {FAULT_REASONS.get(spec.split("=")[0].split("@")[0], "?") for spec in args.fault}
    unexplained = {reason: n for reason, n in reasons.items()
                   if not any(reason.startswith(prefix) or prefix in reason for prefix in injected)}
    # start: once every user streams (warm-up); end: the last sample within the planned duration
    # (counted from Locust's start, less a few seconds), before the end-of-run summary is computed
    start = next((s for s in samples if s[0] >= WARMUP_S), samples[0] if samples else (0, 0, 0))
    planned_end = args.minutes * 60 - 3.0
    end = next((s for s in reversed(samples) if s[0] <= planned_end), samples[-1] if samples else (0, 0, 0))
    growth = end[1] - start[1]
    per_record_kb = growth * 1024 / max(end[2] - start[2], 1)
    print()
    print(f"streams {args.streams}, {args.minutes:g} min, Locust exit code {code}")
    print(f"requests {len(records)} ({len(measured)} measured), failed {sum(reasons.values())}")
    for reason, n in reasons.most_common():
        print(f"  {n:6d}  {reason}{'' if reason not in unexplained else '   <- unexplained'}")
    role = "master" if args.processes else "client"
    print(f"{role} memory (RSS): start {start[1]:.1f} MB at {start[0]:.0f} s ({start[2]} records), "
          f"end {end[1]:.1f} MB at {end[0]:.0f} s ({end[2]} records), growth {growth:+.1f} MB "
          f"({per_record_kb:.2f} kB per record), peak {max((s[1] for s in samples), default=0):.1f} MB")
    verdict = growth <= TARGET_GROWTH_MB and not unexplained
    print(f"target: growth <= {TARGET_GROWTH_MB:g} MB and no unexplained failures -> {'MET' if verdict else 'MISSED'}")
    if code not in (0, 1):
        print(f"Locust log: {log}")
    return 0 if verdict else 1


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    except OSError:
        return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
