"""How long `python -m analysis report` takes on one million records (target: at most 5 s on a
2-core machine).

Writes a synthetic run (a protocol run plus a long free-running cell at 64 streams, 1% failures)
to a temporary directory, then times loading it and building and rendering the full report.

    python benchmarks/analysis_speed.py [--records 1000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.report import run_report
from analysis.rundir import load_run
from loadlib.report import console, json
from loadlib.scenarios.thread import SINGLE_STREAM_SCENARIOS, different_prompts

T0 = 1_800_000_000.0
STREAMS = 64


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keep", metavar="DIR", help="write the run here and keep it")
    args = parser.parse_args()
    run_dir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="analysis-speed-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        started = time.perf_counter()
        synthetic_records(args.records).to_json(run_dir / "records.jsonl", orient="records", lines=True)
        size_mb = (run_dir / "records.jsonl").stat().st_size / 1e6
        print(f"wrote {args.records:,} records ({size_mb:,.0f} MB) in {time.perf_counter() - started:.1f} s")

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
        print(f"report of {len(run.records):,} records: {rendered - started:.2f} s (target <= 5 s); "
              f"CPU {_cpu_seconds() - cpu_started:.2f} s (this process and its forked journal reader)")
        print(text[text.index("Steady state"):].split("\n\n")[0])
    finally:
        if not args.keep:
            shutil.rmtree(run_dir)


if __name__ == "__main__":
    main()
