"""`python -m analysis`: tables, comparisons and plots from the raw records of runs.

  report RUN_DIR                   every figure of one run
  compare RUN_DIR RUN_DIR ...      one column a run, differences to the first
  panorama RUN_DIR ...             configuration x (same, different) per concurrency, scaling
  plot RUN_DIR ... --out DIR       PNG charts
  html RUN_DIR ... --out FILE      one self-contained report.html: one run, or several side by side
  export RUN_DIR --format F        other tools' formats, one file per cell: vllm (vllm bench serve's
                                   result JSON), llmd (llm-d's Benchmark Report 0.2.1)

compare (and report) also read a `vllm bench serve` result JSON in place of a run directory.

Bad input ends with one line naming it and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from analysis.compare import compare
from analysis.panorama import panorama
from analysis.report import run_report
from loadlib.figures.goodput import DEFAULT_SLO
from loadlib.outputs import EXPORT_FORMATS, TABLE_FORMATS, Reading, output
from loadlib.run_view import RunDirError, read_runs

USAGE_ERROR = 2
DOCUMENTS = {"report": run_report, "compare": compare, "panorama": panorama}  # what each table command shows


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "export" and args.format not in EXPORT_FORMATS:
        print(f"python -m analysis export: unknown --format {args.format!r} (one of: {', '.join(EXPORT_FORMATS)})",
              file=sys.stderr)
        return USAGE_ERROR
    labels = args.labels.split(",") if getattr(args, "labels", None) else []
    if labels and len(labels) != len(args.run_dirs):
        parser.error(f"--labels names {len(labels)} runs but {len(args.run_dirs)} were given")
    try:
        views = read_runs(args.run_dirs, labels, slo_ttft_s=getattr(args, "slo_ttft", None),
                          slo_decode_tps=getattr(args, "slo_decode", None))
    except RunDirError as exc:
        print(f"python -m analysis {args.command}: {exc}", file=sys.stderr)
        return USAGE_ERROR
    if args.command in DOCUMENTS:
        make = DOCUMENTS[args.command]
        print(output(args.format).render(Reading(views, lambda: make(views))))
        return 0
    if args.command == "export" and views[0].path is None:  # a vLLM result: there is nothing to export
        print(f"python -m analysis export: {args.run_dirs[0]}: not a run directory", file=sys.stderr)
        return USAGE_ERROR
    empty = next((given for given, view in zip(args.run_dirs, views) if view.records.empty), None)
    if empty is not None and args.command in ("html", "export"):  # a page or an export of no request is bad input
        print(f"python -m analysis {args.command}: {empty}: no measured request in the run", file=sys.stderr)
        return USAGE_ERROR
    name = args.format if args.command == "export" else {"html": "html", "plot": "png"}[args.command]
    out = Path(args.out) if args.out else Path(args.run_dirs[0]) / "exports" / args.format  # only export has no --out
    try:
        print(output(name).render(Reading(views, out=out)))
    except OSError as exc:
        print(f"python -m analysis {args.command}: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return USAGE_ERROR
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help="every figure of one run")
    report.add_argument("run_dirs", metavar="RUN_DIR", nargs=1)
    _add_format(report)
    _add_slo(report)
    for name, help_text in (("compare", "several runs side by side, one column a run"),
                            ("panorama", "configuration x (same, different) per concurrency, and scaling")):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("run_dirs", metavar="RUN_DIR", nargs="+")
        command.add_argument("--labels", help="comma-separated column names, one per run (default: directory names)")
        _add_format(command)
        if name == "compare":
            _add_slo(command)
    charts = commands.add_parser("plot", help="PNG charts of one or several runs")
    charts.add_argument("run_dirs", metavar="RUN_DIR", nargs="+")
    charts.add_argument("--labels", help="comma-separated legend names, one per run")
    charts.add_argument("--out", required=True, metavar="DIR", help="directory for the PNG files")
    page = commands.add_parser("html", help="one self-contained HTML report of one run or several side by side")
    page.add_argument("run_dirs", metavar="RUN_DIR", nargs="+")
    page.add_argument("--labels", help="comma-separated names, one per run (default: directory names)")
    page.add_argument("--out", required=True, metavar="FILE", help="the HTML file to write")
    _add_slo(page)
    export = commands.add_parser("export", help="other tools' formats, one file per cell")
    export.add_argument("run_dirs", metavar="RUN_DIR", nargs=1)
    export.add_argument("--format", required=True, metavar="|".join(EXPORT_FORMATS),
                        help="; ".join(f"{name}: {output(name).HELP}" for name in EXPORT_FORMATS))
    export.add_argument("--out", default=None, metavar="DIR",
                        help="the folder for the files (default: RUN_DIR/exports/FORMAT)")
    return parser


def _add_format(parser: argparse.ArgumentParser) -> None:
    """One option a table format besides text (`loadlib.outputs`), with its module's `HELP`."""
    group = parser.add_mutually_exclusive_group()
    for name in TABLE_FORMATS[1:]:
        group.add_argument(f"--{name}", dest="format", action="store_const", const=name,
                           help=output(name).HELP)
    parser.set_defaults(format="text")


def _add_slo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--slo-ttft", type=float, default=None, metavar="S",
                        help=f"goodput: TTFT at most S seconds (default: the run profile's, else "
                             f"{DEFAULT_SLO.ttft_s:g})")
    parser.add_argument("--slo-decode", type=float, default=None, metavar="TPS",
                        help=f"goodput: decode at least TPS tokens/s (default: the run profile's, else "
                             f"{DEFAULT_SLO.decode_tps:g})")


if __name__ == "__main__":
    warnings.formatwarning = lambda message, *_args, **_kw: f"warning: {message}\n"
    sys.exit(main())
