"""Every judgement against cases whose truth is known: does each check fire where its fault is,
and stay silent where there is none?

Each case runs the tool (headless Locust) against a fresh simulator that is healthy or has one
fault put there on purpose, then reads the run's judgements from `python -m analysis report RUN
--json` (its validity checks, the manifest's capacity search and whether the run was cut short).
Each case says by construction which cells hold its fault and which checks exist to catch it; a
check that fails is "fired". The matrix counts, per check, the cells where it fired among those
where it should (its fault is there) and among those where it should not (healthy cells, and
the other checks of a faulty cell); then it lists every surprise with the check's own words.

    python benchmarks/judgements.py                      # every case, 3 repeats (about 8 minutes)
    python benchmarks/judgements.py --quick --repeats 1  # the cheap rows, once each (about a minute)
    python benchmarks/judgements.py --cases count-skew,front-queue --repeats 5

The simulator runs at `--time-scale 0.05` and the server is scraped every 0.25 s (its default
5 s at the same scale), so a run takes seconds. The client's own CPU decides `client_headroom`
on every run: on a busy machine it fires on healthy cases too, and says "machine busy".
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager, Iterator, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from loadlib.report.protocol import cut_short  # noqa: E402
from loadlib.scenarios.thread import PROTOCOL_PROMPTS  # noqa: E402
from loadlib.sim.presets import DEFAULT_PRESET, PRESETS  # noqa: E402
from loadlib.sim.process import SimulatorProcess, start_simulator  # noqa: E402

SCALE = 0.05  # the simulator's --time-scale
METRICS_INTERVAL_S = 5 * SCALE  # the tool's default scrape interval, at the same scale
RUN_TIMEOUT_S = 180.0
DFLASH = REPO / "locustfiles" / "dflash.py"
STARVED = REPO / "benchmarks" / "starved_client.py"
RUN = "(run)"  # the pseudo-cell of the run-level judgements

CHECKS = ("client_headroom", "tokens", "requests", "in_flight", "ttft", "littles_law", "cache_state", "accept_length",
          "spec_account", "overlap", "cut_short", "capacity")  # the matrix's rows, in this order (any other check follows)

# --- the cases' loads ----------------------------------------------------------------------------

ROUNDS = ("--rounds", "2", "--scenarios", "code,cn_chat", "--concurrency", "2", "-u", "2")
RADIX = """
[request]
max_tokens = 64
thinking = false
[load]
mode = "rounds"
rounds = 2
concurrency = [2]
[scenarios.radix-hit]
"""
CLOSED = """
[request]
max_tokens = 128
thinking = false
[load]
mode = "closed"
warmup_s = 0.5
duration_s = 4
jitter_s = 0.2
[scenarios.protocol]
"""

# A paced server: one request at a time, one token per verify step, so its most requests/s
# follow from the preset's timing model: each request holds it for at least one prefill step and
# PACED_TOKENS - 1 verify steps.
PACED = ("--max-running-requests", "1", "--speculative-num-draft-tokens", "1")
PACED_TOKENS = 16
_PRESET = PRESETS[DEFAULT_PRESET]
PACED_MAX_RPS = 1 / (SCALE * (_PRESET.prefill_step_s + (PACED_TOKENS - 1) * _PRESET.verify_step_s))
CALM_RPS, OVERLOAD_RPS = 6, 96  # a request every 167 ms, each served in about 30 ms; twice what it can serve
assert CALM_RPS <= PACED_MAX_RPS / 6 and OVERLOAD_RPS >= 1.5 * PACED_MAX_RPS, PACED_MAX_RPS
OPEN = f"""
[request]
max_tokens = {PACED_TOKENS}
thinking = false
[load]
mode = "open"
rate_rps = 8
warmup_s = 0.5
duration_s = 4
[scenarios.protocol]
single = ["code"]
"""
# A rate search from a calm level to an overload: the overload's queue grows by at least
# OVERLOAD_RPS - PACED_MAX_RPS >= PACED_MAX_RPS requests a second, so a request sent t s into the
# level waits at least t s; the last tenth of its 3 measured seconds wait at least 2.7 s from
# their intended send, far beyond the SLO's 0.25 s (5 s unscaled). Levels in between are not scored.
SEARCH = f"""
seed = 1
[request]
max_tokens = {PACED_TOKENS}
thinking = false
[load]
mode = "search"
variable = "rate"
start = {CALM_RPS}
step = {OVERLOAD_RPS // CALM_RPS}
max_rate = {OVERLOAD_RPS}
precision = 0.5
warmup_s = 0.5
duration_s = 3
[scenarios.protocol]
single = ["code"]
[slo]
ttft_s = 0.25
ttft_p = 90
"""


def search_level(cell: str, load: float | None) -> bool | None:
    """A search level's truth by its rate (`load`): True (overloaded: it must break), False (calm:
    it must hold), None between, where the truth depends on the SLO and the level's length (not
    scored); the run-level judgements' pseudo-cell is healthy."""
    if load is None:
        return False if cell == RUN else None
    return True if load >= 1.5 * PACED_MAX_RPS else False if load <= PACED_MAX_RPS / 6 else None


# --- what is done to the server during a run ----------------------------------------------------

Meddler = Callable[[SimulatorProcess, Path], ContextManager[None]]


@contextlib.contextmanager
def kill_midway(sim: SimulatorProcess, run_dir: Path, after: int = 6) -> Iterator[None]:
    """SIGKILLs the simulator once the run has kept `after` records."""
    done = threading.Event()

    def watch() -> None:
        journal = run_dir / "records.jsonl"
        while not done.wait(0.05):
            if journal.exists() and journal.read_bytes().count(b"\n") >= after:
                sim.proc.kill()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


@contextlib.contextmanager
def another_client(sim: SimulatorProcess, run_dir: Path, streams: int = 2) -> Iterator[None]:
    """`streams` requests of another client in flight at the same server throughout the run."""
    done = threading.Event()
    host, port = sim.url.rsplit("/", 1)[1].split(":")
    body = json.dumps({"model": "other", "messages": [{"role": "user", "content": PROTOCOL_PROMPTS["en_tech"]}],
                       "max_tokens": 64, "stream": True, "chat_template_kwargs": {"enable_thinking": False}})

    def send() -> None:
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        while not done.is_set():
            try:
                connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
                connection.getresponse().read()
            except (OSError, http.client.HTTPException):
                connection.close()
                done.wait(0.05)

    senders = [threading.Thread(target=send, daemon=True) for _ in range(streams)]
    for sender in senders:
        sender.start()
    try:
        yield
    finally:
        done.set()
        for sender in senders:
            sender.join()


# --- the cases -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """A run whose truth is known by construction. `fire`: the checks that exist for its fault;
    `where(cell, load)`: True where the fault is, False for a healthy cell, None for a cell not
    scored, by the cell's name (RUN for the run-level judgements) and load (its streams, or a
    search level's value; None where the report gives none); `may`: checks the fault moves too,
    not scored."""

    name: str
    truth: str  # what is wrong, or that nothing is
    locust: tuple[str, ...] = ROUNDS
    sim: tuple[str, ...] = ()
    profile: str | None = None
    fire: frozenset[str] = frozenset()
    may: frozenset[str] = frozenset()
    where: Callable[[str, float | None], bool | None] = lambda cell, load: True
    quick: bool = False
    locustfile: Path = DFLASH
    meddle: Meddler | None = None


def _streams_above(streams: int) -> Callable[[str, float | None], bool]:
    """The cells that run more than `streams` streams at once (a single stream has no load)."""
    return lambda cell, load: (load or 1) > streams


CASES = {case.name: case for case in (
    Case("rounds", "healthy: the preset, 1 and 2 streams, 2 rounds", quick=True),
    Case("rounds-c8", "healthy: 2, 4 and 8 streams on a server that runs 8 at once",
         ("--rounds", "2", "--scenarios", "code", "--concurrency", "2,4,8", "-u", "8"),
         sim=("--max-running-requests", "8")),
    Case("rounds-vllm", "healthy: the preset as vLLM", sim=("--flavor", "vllm"), quick=True),
    Case("rounds-llamacpp", "healthy: the preset as llama.cpp", sim=("--flavor", "llamacpp"), quick=True),
    Case("radix", "healthy: a radix-hit prompt primed, then 2 streams on it", ("-u", "2"), profile=RADIX,
         quick=True),
    Case("closed", "healthy: 4 closed-loop users for 4 s on a server that runs 4 at once", ("-u", "4"),
         sim=("--max-running-requests", "4"), profile=CLOSED),
    Case("open", f"healthy: 8 req/s on a paced server (at most {PACED_MAX_RPS:.0f} req/s)", ("-u", "8"),
         sim=PACED, profile=OPEN),
    Case("count-skew", "the server's token counter leaves out 10 % of what it streams",
         sim=("--fault", "count_skew=0.1"), fire=frozenset({"tokens"}), quick=True),
    # 4 rounds: a gauge value is the cell's from its second change (the first interval to end in a
    # cell began before it), and 2 rounds of merged chunks are often over before one comes
    Case("merged-chunks", "the server streams every 4th step (--stream-interval 4): 4 steps a chunk",
         ("--rounds", "4", *ROUNDS[2:]), sim=("--stream-interval", "4"), fire=frozenset({"accept_length"}),
         quick=True),
    Case("front-queue", "4 streams through a queue in front that lets 1 request through at a time",
         ("--rounds", "3", "--scenarios", "code", "--concurrency", "4", "-u", "4"),
         sim=("--fault", "front_queue=1"), fire=frozenset({"ttft", "overlap"}), may=frozenset({"in_flight"}),
         where=_streams_above(1),
         quick=True),
    Case("front-queue-llamacpp", "4 streams through a queue in front that lets 1 request through at a time, to a "
         "server that counts what it holds at the scrape and has no TTFT histogram (llama.cpp)",
         ("--rounds", "3", "--scenarios", "code", "--concurrency", "4", "-u", "4"),
         sim=("--flavor", "llamacpp", "--fault", "front_queue=1"), fire=frozenset({"in_flight", "overlap"}),
         where=_streams_above(1), quick=True),
    Case("front-queue-closed", "4 closed-loop users through a queue in front that lets 2 through at a time "
         "(a steady loop: Little's law holds)", ("-u", "4"),
         sim=("--max-running-requests", "4", "--fault", "front_queue=2"), profile=CLOSED,
         fire=frozenset({"ttft"}), may=frozenset({"in_flight", "overlap"})),
    Case("streams-above-mrr", "4 streams on the preset, which runs 2 at once: the 4 do not run together",
         ("--rounds", "2", "--scenarios", "code", "--concurrency", "4", "-u", "4"),
         fire=frozenset({"overlap"}), where=_streams_above(2), quick=True),
    Case("cache-drop", "the prefix cache is emptied as each request arrives: primed prompts meet it cold",
         ("-u", "2"), sim=("--fault", "cache_drop"), profile=RADIX, fire=frozenset({"cache_state"}), quick=True),
    Case("starved-client", "a thread spinning in the client's process takes a core",
         locustfile=STARVED, fire=frozenset({"client_headroom"}), may=frozenset({"in_flight", "ttft"}), quick=True),
    Case("other-client", "another client keeps 2 requests in flight at the same server",
         sim=("--max-running-requests", "8"), meddle=another_client,
         fire=frozenset({"requests", "tokens", "spec_account"}), may=frozenset({"accept_length", "in_flight"}),
         quick=True),
    Case("server-killed", "the server is killed (SIGKILL) after the run's 6th record",
         ("--rounds", "2", "--scenarios", "code,en_tech,cn_chat,cn_essay", "--concurrency", "2,4", "-u", "4"),
         meddle=kill_midway, fire=frozenset({"cut_short"}), where=lambda cell, load: True if cell == RUN else None),
    Case("search-server-queue", f"a rate search on a paced server from {CALM_RPS} req/s (calm) to "
         f"{OVERLOAD_RPS} req/s (overloaded), -u 256: the queue grows at the server",
         ("-u", "256"), sim=PACED, profile=SEARCH, fire=frozenset({"capacity", "littles_law"}), where=search_level),
    Case("search-client-queue", "the same search with -u 1: the queue grows at the client, before the send",
         ("-u", "1"), sim=PACED, profile=SEARCH, fire=frozenset({"capacity"}), may=frozenset({"littles_law"}),
         where=search_level),
)}


# --- one run ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Judgement:
    cell: str
    check: str
    ok: bool | None  # False: it fired; None: it could not be made
    detail: str


@dataclass
class Outcome:
    case: Case
    repeat: int
    run_dir: Path
    seconds: float
    returncode: int
    load: float  # the machine's 1-minute load average at the run's end
    judgements: list[Judgement] = field(default_factory=list)
    loads: dict[str, float] = field(default_factory=dict)  # cell -> its streams, or its search level's value
    problem: str = ""  # why the run has no judgements


class Running:
    """One case's run, started: a simulator, what is done to it, and Locust against it."""

    def __init__(self, case: Case, out_dir: Path, repeat: int = 1) -> None:
        self.case, self.repeat = case, repeat
        self.facts = out_dir / f"{case.name}-{repeat}.json"
        self.run_dir = out_dir / f"{case.name}-{repeat}"
        self.log = out_dir / f"{case.name}-{repeat}.log"
        self.stack = contextlib.ExitStack()  # closed in reverse: what is done to the server, then the server
        sim = self.stack.enter_context(start_simulator(["--time-scale", str(SCALE), *case.sim]))
        command = [sys.executable, "-m", "locust", "-f", str(case.locustfile), "--headless", "--host", sim.url,
                   "--run-dir", str(self.run_dir), "--metrics-interval", str(METRICS_INTERVAL_S),
                   "--loglevel", "WARNING", *case.locust]
        if case.profile is not None:
            profile = out_dir / f"{case.name}.toml"
            profile.write_text(case.profile)
            command += ["--profile", str(profile)]
        self.started = time.monotonic()
        if case.meddle is not None:
            self.stack.enter_context(case.meddle(sim, self.run_dir))
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    def finish(self) -> Outcome:
        with self.stack:
            try:
                returncode = self.proc.wait(RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                returncode = self.proc.wait()
            seconds = time.monotonic() - self.started
        facts = {"case": self.case.name, "repeat": self.repeat, "seconds": seconds, "returncode": returncode,
                 "load": os.getloadavg()[0]}
        self.facts.write_text(json.dumps(facts))
        return judged(facts, self.run_dir, self.log)


def judged(facts: dict, run_dir: Path, log: Path) -> Outcome:
    """A run's outcome from what `Running.finish` kept of it, judged from its report."""
    outcome = Outcome(CASES[facts["case"]], facts["repeat"], run_dir, facts["seconds"], facts["returncode"],
                      facts["load"])
    try:
        outcome.judgements, outcome.loads = judgements(run_dir)
    except (OSError, ValueError, subprocess.CalledProcessError) as exc:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
        outcome.problem = f"no report ({exc}); exit status {outcome.returncode}; log: " + " | ".join(tail)
    return outcome


def rescored(kept: Path) -> list[Outcome]:
    """The runs kept under `kept` (by --keep), judged again by the report of this checkout."""
    outcomes = []
    for facts_file in sorted(kept.glob("*.json")):
        facts = json.loads(facts_file.read_text())
        if facts.get("case") in CASES:
            stem = facts_file.with_suffix("")
            outcomes.append(judged(facts, stem, stem.with_suffix(".log")))
    return sorted(outcomes, key=lambda o: (o.repeat, list(CASES).index(o.case.name)))


def run_case(case: Case, out_dir: Path, repeat: int = 1) -> Outcome:
    return Running(case, out_dir, repeat).finish()


def judgements(run_dir: Path) -> tuple[list[Judgement], dict[str, float]]:
    """The run's judgements as its report gives them: every validity check, the capacity
    search's verdict per level, and whether the run was cut short; and each cell's load, as the
    report gives it: a concurrent cell's streams, a search level's value."""
    report = json.loads(subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir), "--json"],
                                       cwd=REPO, capture_output=True, text=True, check=True).stdout)
    found = [Judgement(c["cell"], c["name"], c["ok"], c["detail"]) for c in report["validity"]["checks"]]
    manifest = report["manifest"]
    why = cut_short(manifest)
    found.append(Judgement(RUN, "cut_short", why is None, f"CUT SHORT: {why}" if why else
                           "the run ended as planned (no CUT SHORT)"))
    search = manifest.get("search") or {}
    unit = "req/s" if search.get("variable") == "rate" else "users"
    for level in search.get("levels", ()):
        held = level["verdict"] == "held"
        ttft = "-" if level["ttft_s"] is None else f"{level['ttft_s']:.3f} s"
        found.append(Judgement(level["cell"], "capacity", held, (
            f"{level['value']:g} {unit}: {level['verdict']} (TTFT p{level['ttft_p']:g} {ttft} over {level['n']} "
            f"requests, {level['failed']} failed; SLO met in {level['pass_share']:.0%} of resamples)")))
    loads = {row["cell"]: row["concurrency"] for row in report["concurrent"]}
    loads.update({cell: level["value"] for level in search.get("levels", ()) for cell in level["cells"]})
    return found, loads


# --- scoring -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sample:
    """One check of one cell against its truth."""

    case: str
    repeat: int
    cell: str
    check: str
    should_fire: bool
    fired: bool
    detail: str

    @property
    def surprise(self) -> bool:
        return self.should_fire != self.fired


def _applies(check: str, cell: str, levels: set[str]) -> bool:
    if check == "cut_short":
        return cell == RUN
    if check == "capacity":
        return cell in levels
    return cell != RUN


def score(outcome: Outcome) -> list[Sample]:
    """Every scored check of the run: where the fault is, its `fire` checks should have failed
    (one that is missing counts as silent) and the others not; in a healthy cell none should."""
    case = outcome.case
    by_cell: dict[str, dict[str, list[Judgement]]] = defaultdict(lambda: defaultdict(list))
    for judgement in outcome.judgements:
        by_cell[judgement.cell][judgement.check].append(judgement)
    levels = {cell for cell, checks in by_cell.items() if "capacity" in checks}
    samples = []
    for cell, checks in by_cell.items():
        faulty = case.where(cell, outcome.loads.get(cell))
        if faulty is None:
            continue
        wanted = {check for check in case.fire if _applies(check, cell, levels)} if faulty else set()
        for check in sorted(set(checks) | wanted):
            if check in case.may and faulty:
                continue
            found = checks.get(check, [])
            failed = [j for j in found if j.ok is False]
            detail = (failed or found)[0].detail if found else f"no `{check}` check in this cell"
            if found and not failed and all(j.ok is None for j in found):
                detail = "not made: " + detail
            samples.append(Sample(case.name, outcome.repeat, cell, check, check in wanted, bool(failed), detail))
    return samples


# --- the matrix ------------------------------------------------------------------------------------

def matrix(outcomes: Sequence[Outcome]) -> str:
    samples = [s for outcome in outcomes for s in score(outcome)]
    names = [c for c in CHECKS if any(s.check == c for s in samples)]
    names += sorted({s.check for s in samples} - set(names))
    rows = [("check", "should fire: fired/cells", "runs", "should not fire: fired/cells", "runs", "fault cases")]
    for check in names:
        mine = [s for s in samples if s.check == check]
        fire = [s for s in mine if s.should_fire]
        quiet = [s for s in mine if not s.should_fire]
        rows.append((check, _share(fire), _runs(fire, all), _share(quiet), _runs(quiet, any),
                     ", ".join(dict.fromkeys(s.case for s in fire)) or "-"))
    lines = _table(rows)
    lines += ["", "fired/cells: the cells where the check failed, of those scored; runs: for 'should fire', the runs "
              "where it failed in every cell of its fault; for 'should not fire', the runs where it failed in any "
              "cell; ! marks a surprise (listed below)"]
    return "\n".join(lines)


def _share(samples: list[Sample]) -> str:
    if not samples:
        return "-"
    fired = sum(s.fired for s in samples)
    surprise = any(s.surprise for s in samples)
    return f"{fired}/{len(samples)}" + (" !" if surprise else "")


def _runs(samples: list[Sample], rule: Callable) -> str:
    runs: dict[tuple[str, int], list[bool]] = defaultdict(list)
    for s in samples:
        runs[(s.case, s.repeat)].append(s.fired)
    return f"{sum(rule(fired) for fired in runs.values())}/{len(runs)}" if runs else "-"


def per_case(outcomes: Sequence[Outcome]) -> str:
    rows = [("case", "runs", "s/run", "where its fault is: fired (cells)", "healthy cells: fired (cells)", "truth")]
    for name in dict.fromkeys(o.case.name for o in outcomes):
        mine = [o for o in outcomes if o.case.name == name]
        samples = [s for o in mine for s in score(o)]
        rows.append((name, str(len(mine)), f"{sum(o.seconds for o in mine) / len(mine):.1f}",
                     _fired(samples, True), _fired(samples, False), mine[0].case.truth))
    return "\n".join(_table(rows))


def _fired(samples: list[Sample], should: bool) -> str:
    counts: dict[str, list[bool]] = defaultdict(list)
    for s in samples:
        if s.should_fire == should and (s.fired or should):
            counts[s.check].append(s.fired)
    total: dict[str, int] = defaultdict(int)
    for s in samples:
        if s.should_fire == should:
            total[s.check] += 1
    return ", ".join(f"{check} {sum(fired)}/{total[check]}" for check, fired in counts.items()) or "-"


def surprises(outcomes: Sequence[Outcome]) -> str:
    """Every check that fired on a healthy cell or stayed silent on its fault: per check, how
    many cells, then per case its first such cell with the check's own detail line; and every run
    that gave no judgements."""
    lines = [f"  {o.case.name} #{o.repeat}: {o.problem}" for o in outcomes if o.problem]
    samples = [s for outcome in outcomes for s in score(outcome)]
    order = {check: i for i, check in enumerate(CHECKS)}
    for check, should in sorted({(s.check, s.should_fire) for s in samples if s.surprise},
                                key=lambda key: (order.get(key[0], len(order)), key)):
        scored = [s for s in samples if s.check == check and s.should_fire == should]
        found = [s for s in scored if s.surprise]
        what = "silent on its fault" if should else "fired on a healthy cell"
        lines.append(f"  {check} {what}: {len(found)} of {len(scored)} cells")
        for case in dict.fromkeys(s.case for s in found):
            first = next(s for s in found if s.case == case)
            cells = sum(s.case == case for s in found), sum(s.case == case for s in scored)
            lines.append(f"    {case} #{first.repeat} {first.cell} ({cells[0]} of {cells[1]} cells): {first.detail}")
    return "\n".join(lines) if lines else "  none"


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] for row in rows]


# --- the command -----------------------------------------------------------------------------------

def choose(names: str, quick: bool) -> list[Case]:
    """The cases asked for; ValueError names an unknown one."""
    chosen = [case for case in CASES.values() if case.quick or not quick]
    if names:
        wanted = [name.strip() for name in names.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in CASES]
        if unknown:
            raise ValueError(f"unknown case {unknown[0]!r} (known: {', '.join(CASES)})")
        chosen = [case for case in chosen if case.name in wanted]
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each case (default 3)")
    parser.add_argument("--cases", default="", help=f"comma-separated names (default all: {', '.join(CASES)})")
    parser.add_argument("--quick", action="store_true", help="only the cheap cases: " + ", ".join(
        name for name, case in CASES.items() if case.quick))
    parser.add_argument("--keep", metavar="DIR", help="keep the runs (directories and logs) under DIR")
    parser.add_argument("--rescore", metavar="DIR", help="run nothing: judge again the runs kept under DIR by "
                        "--keep, with this checkout's report (the run-level judgements stay as they were made)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.exit(2, "judgements.py: error: --repeats must be 1 or more\n")
    try:
        cases = choose(args.cases, args.quick)
    except ValueError as exc:
        parser.exit(2, f"judgements.py: error: --cases: {exc}\n")
    started = time.monotonic()
    if args.rescore:
        outcomes = [o for o in rescored(Path(args.rescore)) if o.case in cases]
        if not outcomes:
            parser.exit(2, f"judgements.py: error: --rescore: no kept run of these cases under {args.rescore}\n")
        heading = f"Judgements of {len(outcomes)} runs kept under {args.rescore}, judged again"
    else:
        with contextlib.ExitStack() as stack:
            if args.keep:
                out_dir = Path(args.keep)
                out_dir.mkdir(parents=True, exist_ok=True)
            else:
                out_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="judgements-")))
            outcomes = [run_and_say(case, out_dir, repeat) for repeat in range(1, args.repeats + 1) for case in cases]
        heading = (f"Judgements against known cases: {len(cases)} cases x {args.repeats} repeats = {len(outcomes)} "
                   f"runs in {(time.monotonic() - started) / 60:.1f} min")
    loads = [o.load for o in outcomes]
    print(f"{heading} (simulator --time-scale {SCALE:g}, server scraped every {METRICS_INTERVAL_S:g} s); machine: "
          f"{os.cpu_count()} cores, load average {min(loads):.1f} to {max(loads):.1f}\n")
    print(matrix(outcomes))
    print("\nPer case\n" + per_case(outcomes))
    print("\nSurprises (a check that fired on a healthy cell, or stayed silent on its fault)\n" + surprises(outcomes))
    if args.keep:
        print(f"\nRuns kept under {args.keep} (judge them again: --rescore {args.keep})")
    return 0


def run_and_say(case: Case, out_dir: Path, repeat: int) -> Outcome:
    """One run, and a line on stderr that says what fired."""
    outcome = run_case(case, out_dir, repeat)
    fired = sorted({j.check for j in outcome.judgements if j.ok is False})
    print(f"{case.name} #{repeat}: {outcome.seconds:.1f} s, fired: {', '.join(fired) or 'none'}"
          + (f" ({outcome.problem})" if outcome.problem else ""), file=sys.stderr, flush=True)
    return outcome


if __name__ == "__main__":
    sys.exit(main())
