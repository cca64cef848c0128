"""How long `python -m analysis report` takes on one million records (target: at most 4 s on a
2-core machine), and how long it takes to start.

Writes a synthetic run (a protocol run plus a long free-running cell at 64 streams, 1% failures,
every field a real record has, and a manifest with the client's self-watch, so that the validity
checks run as after a real run) to a temporary directory. Then it ends the run as a real run ends
(`write_summary`: summary.txt, report.html and records.parquet, the journal's columnar copy) and
times: the imports of a fresh `python -m analysis report` (which must not load matplotlib: only the
plot command does); loading the finished run and building and rendering the full report in this
process; the whole command in a fresh process; and loading the journal alone, as for a run killed
before its end (no columnar copy).

    python benchmarks/analysis_speed.py [--records 1000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.report import run_report
from loadlib.outputs import json
from loadlib.outputs.text import render_document
from loadlib.record_table import copy_path
from loadlib.run.manifest import write_manifest
from loadlib.run.summary_files import write_summary
from loadlib.run_view import read_run
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
        cache_intended="any", cache_observed="cold", queue_s=0.0, turn=None, measured=True, target="",
        first_read_events=1, ttfo_s=None, reasoning_tokens=None,
    )
    return df


# What the manifest of a free-running run on one process holds that the report reads: the
# client's self-watch makes the run judged (its validity checks run).
MANIFEST = {
    "tool": {"name": "uni-locust"}, "finished": True, "started_at": T0, "ended_at": T0 + 70_000,
    "protocol": {"rounds": 3, "max_tokens": 512, "temperature": 0.0, "thinking": "off", "concurrency": [2, 4, 8],
                 "users": STREAMS, "processes": None},
    "client_watch": [{"role": "client", "cpu_share_mean": 0.4, "cpu_share_max": 0.7, "loop_lag_p50_s": 0.001,
                      "loop_lag_p99_s": 0.004, "loop_lag_max_s": 0.01, "samples": 70_000, "cores": 2,
                      "run_queue_max": 3, "steal_share_max": 0.0, "involuntary_switches_per_s": 20.0}],
}


def _cpu_seconds() -> float:
    """User + system time of this process (all its threads) and of its finished children."""
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
        write_manifest(run_dir, MANIFEST)
        copy_path(journal).unlink(missing_ok=True)

        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            write_summary(run_dir, None)
        print(f"the run's end (summary.txt, report.html, records.parquet "
              f"{copy_path(journal).stat().st_size / 1e6:,.0f} MB): {time.perf_counter() - started:.2f} s")

        started, cpu_started = time.perf_counter(), _cpu_seconds()
        run = read_run(run_dir)
        loaded = time.perf_counter()
        document = run_report([run])
        built = time.perf_counter()
        text = render_document(document)
        json.render_document(document)
        rendered = time.perf_counter()
        print(f"load {loaded - started:.2f} s, figures {built - loaded:.2f} s, "
              f"render text+json {rendered - built:.2f} s")
        print(f"report of {len(run.records):,} records: {rendered - started:.2f} s (target <= 4 s); "
              f"CPU {_cpu_seconds() - cpu_started:.2f} s")
        print(text[text.index("Steady state"):].split("\n\n")[0])
        del run, document

        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir)], stdout=subprocess.DEVNULL,
                       check=True)
        print(f"the whole `python -m analysis report` in a fresh process: {time.perf_counter() - started:.2f} s "
              f"(target <= 4 s)")

        aside = copy_path(journal).rename(run_dir / "aside.parquet")  # a run killed before its end: the journal alone
        started, cpu_started = time.perf_counter(), _cpu_seconds()
        records = read_run(run_dir).records
        aside.rename(copy_path(journal))
        print(f"a run killed before its end (no records.parquet): load {time.perf_counter() - started:.2f} s "
              f"instead (pyarrow's JSON reader), CPU {_cpu_seconds() - cpu_started:.2f} s for {len(records):,} records")
    finally:
        if not args.keep:
            shutil.rmtree(run_dir)


if __name__ == "__main__":
    main()
