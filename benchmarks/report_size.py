"""How big report.html is for a 100,000-request run (target: under 5 MB), and how long it takes
to write: the synthetic journal of `analysis_speed.py` (the protocol's cells, then a closed loop).

    python benchmarks/report_size.py [--records 100000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.analysis_speed import synthetic_records  # noqa: E402
from loadlib.report.html_page import write_page  # noqa: E402
from loadlib.run_view import read_run  # noqa: E402

LIMIT_MB = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        synthetic_records(args.records).to_json(run_dir / "records.jsonl", orient="records", lines=True)
        started = time.perf_counter()
        page = write_page([read_run(run_dir, "synthetic")], run_dir / "report.html")
        seconds = time.perf_counter() - started
        size_mb = page.stat().st_size / 1e6
    print(f"report.html of {args.records:,} requests: {size_mb:.2f} MB (target < {LIMIT_MB:g} MB), "
          f"written in {seconds:.1f} s")


if __name__ == "__main__":
    main()
