"""This tool's command-line options, added to Locust's own parser.

They are real Locust options: they are read from the command line, the environment and config
files as Locust's are, appear in the web UI's start form, and reach workers with the rest of the
parsed options. `locust -f FILE --help` lists them in their groups (`loadlib.run.locust_help`
loads the locustfile first). Bad values stop the run before it starts with argparse's one-line
error (exit code 2).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any, Mapping

from loadlib.modes import rounds
from loadlib.scenarios.thread import SINGLE_STREAM_SCENARIOS
from loadlib.truth import gpu_power
from loadlib.truth import watch as server_watch
from loadlib.wire.client import DEFAULT_MAX_TOKENS, DEFAULT_THINKING

DEFAULT_CONCURRENCY = ",".join(map(str, rounds.DEFAULT_CONCURRENCY))  # as typed on the command line
DEFAULT_SCENARIOS = ",".join(SINGLE_STREAM_SCENARIOS)
DEFAULT_ROUNDS = rounds.DEFAULT_ROUNDS


def local_processes(argv: list[str], environ: Mapping[str, str]) -> bool:
    """Whether this command runs a master and its workers together (`--processes`) with no port
    named for them: the run then takes a free loopback port of its own."""
    def given(flag: str) -> bool:
        return any(arg == flag or arg.startswith(flag + "=") for arg in argv) or \
            f"LOCUST_{flag[2:].upper().replace('-', '_')}" in environ
    return given("--processes") and not any(given(flag) for flag in ("--worker", "--master-port",
                                                                        "--master-bind-port"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
    return value


def port_number(text: str) -> int:
    """A TCP port to listen on, 1 to 65535 (whether it is free is checked when the run binds it)."""
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, got {value}")
    return value


def int_list(text: str) -> list[int]:
    """`2,4,8` -> [2, 4, 8]; an empty string means none."""
    return [positive_int(part.strip()) for part in text.split(",") if part.strip()]


def name_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


THINKING_WORDS = {"server": "server", "on": "on", "true": "on", "1": "on", "yes": "on",
                  "off": "off", "false": "off", "0": "off", "no": "off"}


def thinking_mode(text: str) -> str:
    """`--thinking`: "on" or "off" send `chat_template_kwargs.enable_thinking`; "server" sends no
    `chat_template_kwargs` at all, as the thread's script does (the server's template decides)."""
    try:
        return THINKING_WORDS[text.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"expected server, on or off, got {text!r}") from None


# `--profile FILE` is Locust's own option (a name that groups test runs); this tool reads it as
# the profile file, so the name also shows in Locust's UI and reports.
# Options a profile sets itself (TOML keys in its [request], [load] and [scenarios.protocol]),
# with their defaults: beside --profile, any other value is refused.
PROFILE_SETTINGS: dict[str, Any] = {
    "rounds": DEFAULT_ROUNDS, "max_tokens": DEFAULT_MAX_TOKENS, "thinking": DEFAULT_THINKING,
    "concurrency": int_list(DEFAULT_CONCURRENCY), "scenarios": name_list(DEFAULT_SCENARIOS),
}

LOAD_MODE_OPTIONS = ("rounds", "concurrency", "scenarios")  # meaningless for a locustfile's own users


class OptionGroup:
    """One heading of `--help`. Its `add_argument` takes Locust's `include_in_web_ui`, as Locust's
    parser does: argparse's groups do not know it, and an option without it stays out of the web
    UI's start form."""

    def __init__(self, parser: Any, title: str, description: str | None = None) -> None:
        self._group = parser.add_argument_group(title, description)

    def add_argument(self, *flags: str, include_in_web_ui: bool = True, **kwargs: Any) -> argparse.Action:
        action = self._group.add_argument(*flags, **kwargs)
        action.include_in_web_ui = include_in_web_ui
        return action


def add_arguments(parser: Any) -> None:
    """Adds the tool's options to Locust's (configargparse) parser, under four headings."""
    parser.set_defaults(web_host="127.0.0.1")  # servers this tool starts bind loopback unless told
    if local_processes(sys.argv[1:], os.environ):
        port = free_port()  # two such runs on one machine must not join each other (Locust's 5557)
        parser.set_defaults(master_bind_host="127.0.0.1", master_bind_port=port, master_port=port)
    requests = OptionGroup(parser, "uni-bench: the server and its requests")
    requests.add_argument("--model", default="", metavar="NAME",
                          help="Model name to request (default: the first id in /v1/models)")
    requests.add_argument("--api-key", default="", metavar="KEY", include_in_web_ui=False,
                          help="API key (default: $OPENAI_API_KEY); never written to any file")
    requests.add_argument("--max-tokens", type=positive_int, default=DEFAULT_MAX_TOKENS, metavar="N",
                          help=f"max_tokens per request (default {DEFAULT_MAX_TOKENS})")
    requests.add_argument("--thinking", type=thinking_mode, default=DEFAULT_THINKING, metavar="server|on|off",
                          help="chat_template_kwargs.enable_thinking on or off, or server: send no "
                               "chat_template_kwargs, the server's chat template decides "
                               f"(default {DEFAULT_THINKING})")
    requests.add_argument("--spec-details", choices=("auto", "on", "off"), default="auto",
                          help="Ask the server for its account of each request's speculative decoding "
                               "(return_spec_tokens_details): auto asks SGLang alone, as /v1/models names it "
                               "(default auto)")
    requests.add_argument("--request-timeout", type=positive_float, default=900.0, metavar="S",
                          help="Seconds one request may take in all (default 900)")
    requests.add_argument("--insecure", action="store_true", default=False,
                          help="Do not verify the server's TLS certificate (default: verify it)")
    requests.add_argument("--sim-args", default="", metavar="ARGS", include_in_web_ui=False,
                          help="Extra arguments for the built-in simulator, used when no --host is given "
                               "(e.g. '--time-scale 0.05 --preset 3090x2-tp2-dflash'; one flag alone takes '=': "
                               "--sim-args=--no-enable-cache-report; default: none)")
    protocol = OptionGroup(parser, "uni-bench: the protocol's rounds",
                           "For a locustfile of ModeUsers (locustfiles/dflash.py). --profile FILE (Locust's\n"
                           "option, above) runs a profile instead (profiles/*.toml, docs/profiles.md),\n"
                           "which sets these itself.")
    protocol.add_argument("--rounds", type=positive_int, default=DEFAULT_ROUNDS, metavar="N",
                          help=f"Rounds per cell (default {DEFAULT_ROUNDS})")
    protocol.add_argument("--concurrency", type=int_list, default=DEFAULT_CONCURRENCY, metavar="N,N,...",
                          help=f"Concurrent stream counts to measure, each at most -u (default {DEFAULT_CONCURRENCY})")
    protocol.add_argument("--scenarios", type=name_list, default=DEFAULT_SCENARIOS, metavar="NAME,...",
                          help=f"Single-stream scenarios (default {DEFAULT_SCENARIOS})")
    run = OptionGroup(parser, "uni-bench: the run")
    run.add_argument("--run-dir", default="", metavar="DIR",
                     help="Where the run's files go (default: runs/<timestamp>-<label>)")
    run.add_argument("--label", default="", metavar="NAME", help="A name for the run (default: sim or the target host)")
    run.add_argument("--keep-going", action="store_true", default=False,
                     help="Run on even when the first requests all fail the same way, or the server goes away "
                          "mid-run (default: stop with the reason)")
    run.add_argument("--chunk-times", action="store_true", default=False,
                     help="Keep each request's gaps between stream chunks in its record (chunk_gaps_ms, about 6 "
                          "bytes a chunk): the vLLM export's itls and the longest chunk gap are then measured "
                          "(default: off, each request's mean gap stands for them)")
    run.add_argument("--metrics-port", type=port_number, default=None, metavar="PORT", include_in_web_ui=False,
                     help="Serve the run's live metrics for Prometheus at http://WEB_HOST:PORT/metrics "
                          "(docs/metrics.md; default: not served)")
    truth = OptionGroup(parser, "uni-bench: the server's /metrics and the GPUs' energy (docs/server-truth.md)")
    server_watch.add_arguments(truth)
    truth.add_argument("--gpu-power", type=gpu_power.gpu_power_option, default=None, metavar="nvml[:0,1]|dcgm=URL",
                       include_in_web_ui=False,
                       help="Read the GPUs' energy around every cell: NVML on this machine (every GPU, or those "
                            "listed; needs the extra 'gpu') or a DCGM exporter's /metrics (default: not read)")
