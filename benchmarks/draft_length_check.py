"""What a shorter draft would accept, estimated and then measured on a real llama-server: the
acceptance by draft position of a run at the longer draft (`loadlib.figures.acceptance`, from the
server's counters per position) gives the expected tokens per verify step at each shorter length;
a second run at the shorter draft measures it (its counters: 1 + accepted drafts / drafts). A draft
model is a chain drafter (its first n drafts are the same whatever the draft's length), so the two
must agree within the noise of a few dozen verify steps a cell.

    python benchmarks/draft_length_check.py [--long 8] [--short 3] [--realsrv /tmp/realsrv]

It starts `llama-server` from a build of ../shared/tools/realsrv (a tiny model and its q8_0 draft,
`--spec-type draft-simple`), two slots, on 127.0.0.1, and runs the protocol's code and cn_essay,
one round of 1 and 2 streams, 128 tokens, against each length (a minute or two each on 2 cores).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from loadlib.figures import acceptance  # noqa: E402
from loadlib.run_view import read_run  # noqa: E402
from loadlib.truth.server_figures import cell_records, cell_scenario  # noqa: E402

RUN = ["--headless", "-u", "2", "--rounds", "1", "--concurrency", "2", "--scenarios", "code,cn_essay",
       "--max-tokens", "128", "--loglevel", "WARNING"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_at(draft: int, realsrv: Path, run_dir: Path) -> None:
    """One protocol run against a llama-server drafting up to `draft` tokens."""
    port = free_port()
    server = subprocess.Popen(
        [str(realsrv / "build" / "bin" / "llama-server"), "-m", str(realsrv / "model.gguf"), "--host", "127.0.0.1",
         "--port", str(port), "-np", "2", "-c", "8192", "-t", "1", "-tb", "1", "--metrics", "--jinja", "--no-webui",
         "-md", str(realsrv / "draft.gguf"), "--spec-type", "draft-simple", "--spec-draft-n-max", str(draft)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).status == 200:
                    break
            except OSError:
                if server.poll() is not None:
                    sys.exit(f"llama-server (draft {draft}) exited while starting")
                time.sleep(0.1)
        subprocess.run([sys.executable, "-m", "locust", "-f", str(REPO / "locustfiles" / "dflash.py"), *RUN,
                        "--host", f"http://127.0.0.1:{port}", "--run-dir", str(run_dir)],
                       cwd=REPO, check=True, capture_output=True, timeout=900)
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", type=int, default=8, help="the draft length measured by position (default 8)")
    parser.add_argument("--short", type=int, default=3, help="the shorter draft length run (default 3)")
    parser.add_argument("--realsrv", type=Path, default=Path("/tmp/realsrv"), help="its build (default /tmp/realsrv)")
    args = parser.parse_args()
    if not (args.realsrv / "build" / "bin" / "llama-server").exists():
        sys.exit(f"no llama-server built at {args.realsrv} (../shared/tools/realsrv/setup.sh builds one)")
    with tempfile.TemporaryDirectory() as work:
        runs = {}
        for draft in (args.long, args.short):
            run_at(draft, args.realsrv, Path(work) / f"draft{draft}")
            runs[draft] = read_run(Path(work) / f"draft{draft}")
        long, short = runs[args.long], runs[args.short]
        curves = acceptance.position_table(long.records, long.spec_counters)
        print(f"llama-server draft-simple, a run at draft {args.long}: expected tokens per verify step at draft "
              f"{args.short}, against a run at draft {args.short} (its counters: 1 + accepted / drafts)")
        for counted in short.spec_counters:
            span = counted.span
            scenario = cell_scenario(span, cell_records(short.records, span))
            curve = curves[(curves["cell"] == span.cell) & (curves["position"] == args.short)
                           & (curves["scenario"] == scenario)]
            measured = 1 + counted.accepted_tokens / counted.verify_steps
            estimate = float(curve["expected_tokens"].iloc[0]) if len(curve) else float("nan")
            print(f"  {span.cell:13s} {scenario:9s} "
                  f"estimate {estimate:.2f}   measured {measured:.2f} ({counted.verify_steps:.0f} steps)   "
                  f"{(estimate / measured - 1) * 100:+.1f} %")
        estimate = acceptance.pooled_expected_tokens(curves)[args.short - 1]
        measured = 1 + (sum(c.accepted_tokens for c in short.spec_counters)
                        / sum(c.verify_steps for c in short.spec_counters))
        print(f"  every cell              estimate {estimate:.2f}   measured {measured:.2f}   "
              f"{(estimate / measured - 1) * 100:+.1f} %")


if __name__ == "__main__":
    main()
