"""`python -m analysis report RUN_DIR [--json]`: the run's figures, recomputed from raw records.

Bad input ends with one line naming it and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence

import orjson

from analysis.rundir import RunDirError, read_journal, read_manifest
from analysis.summary import protocol_summary, render_protocol_summary

USAGE_ERROR = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help="the run's protocol figures")
    report.add_argument("run_dir", metavar="RUN_DIR")
    report.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    try:
        records = read_journal(args.run_dir)
        manifest = read_manifest(args.run_dir)
    except RunDirError as exc:
        print(f"python -m analysis {args.command}: {exc}", file=sys.stderr)
        return USAGE_ERROR
    if args.json:
        sys.stdout.write(orjson.dumps(protocol_summary(records), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(render_protocol_summary(records, manifest))
    return 0


if __name__ == "__main__":
    warnings.formatwarning = lambda message, *_args, **_kw: f"warning: {message}\n"
    sys.exit(main())
