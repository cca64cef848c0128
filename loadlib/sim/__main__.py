"""`python -m loadlib.sim`: start one or more simulated instances and serve until signalled.

Prints `loadlib.sim listening on http://HOST:PORT` once per instance (flushed), so a parent
process can wait for readiness; SIGTERM and SIGINT stop it cleanly with exit status 0.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Callable, Sequence

import gevent

from loadlib.sim import server_args
from loadlib.sim.faults import FaultPicker, parse_spec
from loadlib.sim.presets import DEFAULT_PRESET, PRESETS, SimConfig
from loadlib.sim.server import SimServer
from loadlib.sim.trace import TraceWriter
from loadlib.sim.wire import SHAPES


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit status 2
        self.exit(2, f"loadlib.sim: error: {message}\n")


def _above_zero(convert: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type: a number above 0 (a text `convert` refuses is argparse's "invalid
    int value", after the name copied here)."""
    def parse(text: str) -> float:
        value = convert(text)
        if not value > 0:  # NaN too
            raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
        return value
    parse.__name__ = convert.__name__
    return parse


positive_int, positive_float = _above_zero(int), _above_zero(float)


def fraction(text: str) -> float:
    """An argparse type: a number above 0 and below 1."""
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and below 1, got {value}")
    return value


def _fault(text: str):
    try:
        return parse_spec(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m loadlib.sim", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=30000,
                   help="first port; instance i listens on port+i; 0 picks free ports")
    p.add_argument("--instances", type=positive_int, default=1,
                   help="independent engines on consecutive ports")
    p.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS),
                   help=f"engine parameters of a real deployment (default {DEFAULT_PRESET})")
    p.add_argument("--time-scale", type=positive_float,
                   help="multiply every simulated duration by this (0.05 runs 20x faster)")
    p.add_argument("--trace", help="append one JSON line per finished request to this file")
    p.add_argument("--flavor", choices=sorted(SHAPES), help="wire shapes of this server (loadlib/wire/flavours.py)")
    p.add_argument("--served-model-name", help="model id in /v1/models and responses")
    p.add_argument("--fault", action="append", default=[], type=_fault, metavar="KIND[=VALUE][@SHARE]",
                   help="inject a fault into SHARE of the requests (repeatable; see loadlib/sim/faults.py); "
                        "requests can also ask with the header X-Sim-Fault: KIND[=VALUE]")
    p.add_argument("--fault-seed", type=int, default=0, help="seed of the fault share draws")
    server_args.add_modelled(p.add_argument_group("engine (SGLang launch flags; override the preset)"),
                             positive_int, fraction)
    server_args.add_reported(p.add_argument_group(
        "SGLang launch flags accepted and reported in /get_server_info, not modelled"))
    return p


def config_from_args(args: argparse.Namespace) -> SimConfig:
    return server_args.apply(PRESETS[args.preset], args)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = config_from_args(args)
    try:
        server_args.check(cfg)
    except (ValueError, AssertionError) as exc:  # SGLang's launch_server ends on these, exit status 1
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if cfg.not_modelled:
        print(f"loadlib.sim: accepted but not modelled: {', '.join(cfg.not_modelled)}", file=sys.stderr)
    for line in server_args.startup_warnings(cfg):
        print(line, file=sys.stderr)
    trace = TraceWriter(args.trace) if args.trace else None
    servers = []
    try:
        for i in range(args.instances):
            server = SimServer(cfg, args.host, args.port + i if args.port else 0, trace,
                               FaultPicker(args.fault, args.fault_seed + i))
            server.start()
            servers.append(server)
    except OSError as exc:
        print(f"loadlib.sim: error: cannot listen on {args.host}:{args.port}: {exc.strerror}",
              file=sys.stderr)
        return 1
    stop = gevent.event.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(sig, stop.set)
    for server in servers:
        print(f"loadlib.sim listening on http://{args.host}:{server.port}", flush=True)
    stop.wait()
    for server in servers:
        server.stop()
    if trace is not None:
        trace.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
