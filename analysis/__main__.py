"""`python -m analysis`: tables, comparisons and plots from the raw records of runs.

  report RUN_DIR                   every figure of one run
  compare RUN_DIR RUN_DIR ...      one column a run, differences to the first
  panorama RUN_DIR ...             configuration x (same, different) per concurrency, scaling
  plot RUN_DIR ... --out DIR       PNG charts
  html RUN_DIR ... --out FILE      one self-contained report.html: one run, or several side by side

Bad input ends with one line naming it and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence

from analysis.compare import compare
from analysis.formats import RENDERERS
from analysis.panorama import panorama
from analysis.report import run_report
from analysis.rundir import Run, RunDirError, by_target, load_run
from loadlib.figures.goodput import DEFAULT_SLO

USAGE_ERROR = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    labels = args.labels.split(",") if getattr(args, "labels", None) else []
    if labels and len(labels) != len(args.run_dirs):
        parser.error(f"--labels names {len(labels)} runs but {len(args.run_dirs)} were given")
    try:
        runs = _load(args.run_dirs, labels)
    except RunDirError as exc:
        print(f"python -m analysis {args.command}: {exc}", file=sys.stderr)
        return USAGE_ERROR
    if args.command == "plot":
        from analysis.plot import plot  # matplotlib takes ~0.5 s to import: only the plot command pays it

        for path in plot(runs, args.out):
            print(path)
        return 0
    if args.command == "html":
        return _html(runs, args)
    document = {
        "report": lambda: run_report(runs[0], args.slo_ttft, args.slo_decode),
        "compare": lambda: compare([one for run in runs for one in by_target(run)], args.slo_ttft, args.slo_decode),
        "panorama": lambda: panorama(runs),
    }[args.command]()
    print(RENDERERS[args.format](document))
    return 0


def _html(runs: list[Run], args: argparse.Namespace) -> int:
    """Writes the page of the runs and prints its path and size; a run without records is bad input."""
    from loadlib.figures.goodput import goodput_slo
    from loadlib.report.contents import RunData
    from loadlib.report.html_page import write_page

    for run in runs:
        if run.records.empty:
            print(f"python -m analysis html: {run.path}: no measured request in the run", file=sys.stderr)
            return USAGE_ERROR
    pairs = [(run.label, RunData(run.records, run.manifest, run.path,
                                 goodput_slo(run.manifest, args.slo_ttft, args.slo_decode))) for run in runs]
    try:
        path = write_page(pairs, args.out)
    except OSError as exc:
        print(f"python -m analysis html: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return USAGE_ERROR
    print(f"{path}  ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


def _load(run_dirs: list[str], labels: list[str]) -> list[Run]:
    runs = [load_run(path, label) for path, label in zip(run_dirs, labels or [None] * len(run_dirs))]
    seen = [run.label for run in runs]
    if len(set(seen)) < len(seen):  # two runs named alike would share one column
        runs = [Run(run.path, f"{run.label}#{i + 1}", run.records, run.manifest, run.locust)
                for i, run in enumerate(runs)]
    return runs


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
    return parser


def _add_format(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    for name, help_text in (("json", "JSON, full precision"), ("csv", "one tidy CSV: section,row,column,value"),
                            ("md", "Markdown tables for posting")):
        group.add_argument(f"--{name}", dest="format", action="store_const", const=name, help=help_text)
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
