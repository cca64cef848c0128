"""How long `python -m analysis report` takes on one million records (target: at most 4 s on a
2-core machine), and how long it takes to start.

Writes a synthetic run (a protocol run plus a long free-running cell at 64 streams, 1% failures)
to a temporary directory, then times: the imports of a fresh `python -m analysis report` (which
must not load matplotlib: only the plot command does); loading the run and building and rendering
the full report in this process; and the whole command in a fresh process.

    python benchmarks/analysis_speed.py [--records 1000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.formats import json
from analysis.report import run_report
from analysis.rundir import load_run
from loadlib.report import console
from loadlib.scenarios.thread import SINGLE_STREAM_SCENARIOS, different_prompts

T0 = 1_800_000_000.0
STREAMS = 64
PLOTTING = ("matplotlib", "PIL", "fontTools", "kiwisolver", "contourpy")
# What `python -m analysis report` imports before it reads anything: analysis/__main__.py's imports.
IMPORT_ONLY = ("import sys, analysis.__main__; "
               f"print(','.join(m for m in {PLOTTING!r} if m in sys.modules) or 'none')")


def protocol_part(rounds: int = 3) -> pd.DataFrame:
    rows = []
    clock = T0
    for scenario in SINGLE_STREAM_SCENARIOS:
        for r in range(rounds):
            rows.append(dict(scenario=scenario, cell="single", concurrency=1, case="single", round=r, slot=0,
                             sent_at=clock))
            clock += 3.0
    for n in (2, 4, 8):
        for case in ("same", "different"):
            prompts = ["code"] * n if case == "same" else different_prompts(n)
            for r in range(rounds):
                rows += [dict(scenario=p, cell=f"c{n}-{case}", concurrency=n, case=case, round=r, slot=s,
                              sent_at=clock) for s, p in enumerate(prompts)]
                clock += 4.0
    return pd.DataFrame(rows)


def free_running_part(count: int, start: float, rng: np.random.Generator) -> pd.DataFrame:
    """`STREAMS` closed-loop users: each sends its next request when the previous one ends."""
    per_user = -(-count // STREAMS)
    durations = rng.lognormal(np.log(4.0), 0.3, size=(STREAMS, per_user))
    starts = start + rng.uniform(0, 2, size=(STREAMS, 1)) + np.cumsum(durations, axis=1) - durations
    return pd.DataFrame({
        "scenario": "code", "cell": f"steady-{STREAMS}", "concurrency": STREAMS, "case": "steady", "round": 0,
        "slot": np.repeat(np.arange(STREAMS), per_user), "sent_at": starts.ravel(),
    }).head(count)


def synthetic_records(count: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    protocol = protocol_part()
    df = pd.concat([protocol, free_running_part(count - len(protocol), protocol["sent_at"].max() + 10, rng)],
                   ignore_index=True)
    n = len(df)
    ttft = rng.gamma(4.0, 0.05, n)
    comp = rng.integers(400, 513, n).astype("float64")
    decode = rng.normal(120.0, 15.0, n).clip(20)
    total = ttft + (comp - 1) / decode
    failed = rng.random(n) < 0.01
    reason = np.where(rng.random(n) < 0.5, "http_500", "no_usage")
    df = df.assign(
        request_id=[f"{i:032x}" for i in range(n)], worker=0, user=df["slot"], ttft_s=np.where(failed, np.nan, ttft),
        total_s=total, last_chunk_s=total - 0.001, completion_tokens=np.where(failed, np.nan, comp),
        prompt_tokens=rng.integers(40, 60, n), cached_tokens=np.where(df["case"] == "same", 32, 0),
        chunks=(comp / rng.uniform(1.5, 6.5, n)).round().astype(int), finish_reason="length", http_status=200,
        error=np.where(failed, reason, None), output_sha="0123456789abcdef", max_tokens=512, thinking=False,
        cache_intended="any", cache_observed="cold", queue_s=0.0, turn=None, measured=True,
    )
    return df


def _cpu_seconds() -> float:
    """User + system time of this process and its finished children (the parsing workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def import_seconds(tries: int = 3) -> tuple[float, float, str]:
    """The fastest of `tries` fresh pythons that import what `python -m analysis report` imports,
    the fastest bare python start, and the plotting libraries the import loaded."""
    def fastest(code: str) -> tuple[float, str]:
        best, out = float("inf"), ""
        for _ in range(tries):
            started = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            best = min(best, time.perf_counter() - started)
        return best, out.strip()
    imported, plotting = fastest(IMPORT_ONLY)
    return imported, fastest("pass")[0], plotting


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keep", metavar="DIR", help="write the run here and keep it (a run already there is reused)")
    args = parser.parse_args()
    run_dir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="analysis-speed-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        imported, bare, plotting = import_seconds()
        print(f"import: a fresh python importing what `python -m analysis report` imports takes {imported:.2f} s "
              f"(python alone {bare:.2f} s); plotting libraries loaded: {plotting}")

        journal = run_dir / "records.jsonl"
        if journal.exists():
            print(f"reusing {journal} ({journal.stat().st_size / 1e6:,.0f} MB)")
        else:
            started = time.perf_counter()
            synthetic_records(args.records).to_json(journal, orient="records", lines=True)
            print(f"wrote {args.records:,} records ({journal.stat().st_size / 1e6:,.0f} MB) "
                  f"in {time.perf_counter() - started:.1f} s")

        started, cpu_started = time.perf_counter(), _cpu_seconds()
        run = load_run(run_dir)
        loaded = time.perf_counter()
        document = run_report(run)
        built = time.perf_counter()
        text = console.render(document)
        json.render(document)
        rendered = time.perf_counter()
        print(f"load {loaded - started:.2f} s, figures {built - loaded:.2f} s, "
              f"render text+json {rendered - built:.2f} s")
        print(f"report of {len(run.records):,} records: {rendered - started:.2f} s (target <= 4 s); "
              f"CPU {_cpu_seconds() - cpu_started:.2f} s (this process and its forked journal reader)")
        print(text[text.index("Steady state"):].split("\n\n")[0])

        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir)], stdout=subprocess.DEVNULL,
                       check=True)
        print(f"the whole `python -m analysis report` in a fresh process: {time.perf_counter() - started:.2f} s")
    finally:
        if not args.keep:
            shutil.rmtree(run_dir)


if __name__ == "__main__":
    main()
