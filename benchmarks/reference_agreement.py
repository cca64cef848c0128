"""Agreement with the thread's reference script (`uni_bench.py`), run against the same simulator.

Extracts the reference script from the seed thread (../shared/seeds/), runs it and then this
tool's protocol (`locust -f locustfiles/dflash.py`) against fresh simulators with the same
settings, rounds and max tokens, and prints both sets of figures side by side with the
differences. Targets: single-stream decode within 2% per scenario, 2-stream aggregates within 3%.

    python benchmarks/reference_agreement.py [--rounds 3] [--max-tokens 512] [--time-scale 1]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SEED = REPO.parent / "shared" / "seeds" / "001_9207d83310c47940.txt"
SCENARIO_NAMES = {"代码生成": "code", "英文技术论述": "en_tech", "中文常规对话": "cn_chat", "中文散文": "cn_essay"}
CASE_NAMES = {"同 prompt（radix 命中）": "same", "不同 prompt": "different"}

sys.path.insert(0, str(REPO))
from loadlib.records import read_records  # noqa: E402
from loadlib.report.protocol import protocol_summary  # noqa: E402
from loadlib.sim.process import start_simulator  # noqa: E402


def extract_reference_script(seed: Path) -> str:
    """The script as posted, with the one line the forum's formatting pulled out of its block."""
    text = seed.read_text(encoding="utf-8")
    start = text.index("#!/usr/bin/env python3")
    end = text.index('    main()', start) + len("    main()")
    script = text[start:end]
    return re.sub(r"\n\s*\nrs = list\(ex\.map", "\n                rs = list(ex.map", script)


def run_reference(script: Path, url: str, rounds: int, max_tokens: int) -> dict:
    out = subprocess.run([sys.executable, str(script), "--base-url", url, "--model", "sim",
                          "--rounds", str(rounds), "--max-tokens", str(max_tokens)],
                         capture_output=True, text=True, check=True, timeout=3600).stdout
    single = {SCENARIO_NAMES[m[1]]: float(m[2]) for m in re.finditer(r"^\s+(\S+): decode ([\d.]+) t/s", out, re.M)}
    concurrent = {CASE_NAMES[m[1]]: float(m[2])
                  for m in re.finditer(r"^\s+(.+?): aggregate decode ([\d.]+) t/s", out, re.M)}
    return {"single": single, "concurrent": concurrent, "text": out}


def run_tool(url: str, rounds: int, max_tokens: int, work: Path) -> dict:
    run_dir = work / "tool-run"
    subprocess.run([sys.executable, "-m", "locust", "-f", str(REPO / "locustfiles" / "dflash.py"),
                    "--headless", "-u", "2", "--concurrency", "2", "--host", url, "--model", "sim",
                    "--rounds", str(rounds), "--max-tokens", str(max_tokens), "--run-dir", str(run_dir),
                    "--thinking", "server",  # the script's payload: no chat_template_kwargs
                    "--loglevel", "WARNING", "--only-summary"],
                   capture_output=True, text=True, check=True, timeout=3600, cwd=work)
    summary = protocol_summary(read_records(run_dir))
    return {"single": {name: row["decode_tps"] for name, row in summary["single"].items()},
            "concurrent": {row["case"]: row["aggregate_tps"] for row in summary["concurrent"]},
            "text": (run_dir / "summary.txt").read_text(encoding="utf-8")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--time-scale", type=float, default=1.0, help="simulator time scale")
    parser.add_argument("--seed", type=Path, default=DEFAULT_SEED, help="the seed thread file")
    args = parser.parse_args()
    if not args.seed.is_file():
        parser.exit(2, f"error: --seed {args.seed}: no such file\n")
    sim_args = ["--time-scale", str(args.time_scale)]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        script = work / "uni_bench.py"
        script.write_text(extract_reference_script(args.seed), encoding="utf-8")
        with start_simulator(sim_args) as sim:
            reference = run_reference(script, sim.url, args.rounds, args.max_tokens)
        with start_simulator(sim_args) as sim:
            tool = run_tool(sim.url, args.rounds, args.max_tokens, work)
    print("== reference script output ==")
    print(reference["text"])
    print("== this tool's summary ==")
    print(tool["text"])
    print("== agreement (decode / aggregate t/s) ==")
    print(f"{'figure':<22}{'reference':>12}{'tool':>12}{'diff':>9}  target")
    worst = {"single": 0.0, "concurrent": 0.0}
    for kind, target in (("single", 2.0), ("concurrent", 3.0)):
        for name, ref_value in reference[kind].items():
            value = tool[kind].get(name)
            diff = (value / ref_value - 1) * 100 if value else float("nan")
            worst[kind] = max(worst[kind], abs(diff))
            label = name if kind == "single" else f"2 streams {name}"
            print(f"{label:<22}{ref_value:>12.1f}{value or float('nan'):>12.1f}{diff:>+8.2f}%  ±{target:.0f}%")
    ok = worst["single"] <= 2.0 and worst["concurrent"] <= 3.0
    print(f"worst single-stream difference {worst['single']:.2f}% (target 2%), "
          f"worst 2-stream difference {worst['concurrent']:.2f}% (target 3%): {'MET' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
