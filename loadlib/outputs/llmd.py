"""llm-d's Benchmark Report, version 0.2.1, one per cell (`python -m analysis export RUN --format llmd`).

A report describes one point of an experiment (llm-d-benchmark's docs/benchmark_report.md): here
one cell, its `scenario.load.standardized.stage` the cell's place in the run; the reports of one
run share `run.eid`. `scenario.stack` is the server the manifest names (a generic component: its
kind, version, model and launch flags), `scenario.load` the cell's workload (this tool, the
prompts' lengths, the cell's streams or arrival rate, the run's command and profile), and
`results.request_performance.aggregate` the cell's requests, latencies and rates
(`loadlib.figures.cell_requests`; each statistic with llm-d's percentiles p0p1 ... p99p9).
`results.session_performance` is written for a cell of agent sessions (`loadlib.figures.sessions`:
a session is one copy of one conversation, it failed where one of its turns failed) and
`results.observability` where the run scraped its server during the cell: one component entry
per scraped source (`replica_id`: the source's name, the GPU meter's "gpu"), under the stack's
label, with the gauges, prefix hit rate and power of `loadlib.figures.cell_server`.
Written as JSON, which llm-d reads as YAML. Left out: the ITL (llm-d's is per token; the journal
keeps a gap per chunk at most, with `--chunk-times`), the sessions' cancelled events (a turn never
sent leaves no record), the cell's energy in joules (the schema has watts only).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from loadlib.figures import cell_server
from loadlib.figures.cell_requests import CellRequests, distribution
from loadlib.figures.sessions import sessions_table
from loadlib.outputs import cell_files
from loadlib.truth import energy, server_figures

if TYPE_CHECKING:
    from loadlib.outputs import Reading
    from loadlib.run_view import RunView

HELP = "llm-d's Benchmark Report 0.2.1, one file per cell"
VERSION = "0.2.1"
TOOL = "uni-locust"
STAT_KEYS = {"mean": "mean", "std": "stddev", "min": "min", "max": "max", "0.1": "p0p1", "99.9": "p99p9"}
# the distribution's keys (`cell_requests.distribution`) as a Statistics' keys; a percentile N is pN


def render(reading: Reading) -> str:
    """Writes each cell's report of each view into the folder `reading.out` (a run of several
    servers: a folder per server); the files written, one a line."""
    return "\n".join(write(view, Path(reading.out)) for view in reading.views)


def write(view: RunView, out: Path) -> str:
    lines = []
    experiment = _experiment_id(view)
    for path, stage, cell, server in cell_files(view, out):
        found = report(cell, stage, server, experiment)
        path.write_text(json.dumps(found, indent=2), encoding="utf-8")
        lines.append(f"{path}  stage {stage} {cell.name}: {_counts(cell, found['results'])}")
    return "\n".join(lines)


def _counts(cell: CellRequests, results: dict[str, Any]) -> str:
    """What a report holds, in words: its requests, its sessions, the sources its observability names."""
    count = len(cell.records)
    said = [f"{count} request{'s' * (count != 1)}, {cell.failed} failed"]
    if "session_performance" in results:
        sessions = results["session_performance"]["sessions"]
        said.append(f"{sessions['total']} session{'s' * (sessions['total'] != 1)}, {sessions['failed']} failed")
    if "observability" in results:
        said.append("observability of " + ", ".join(c["replica_id"] for c in results["observability"]["components"]))
    return "; ".join(said)


def report(cell: CellRequests, stage: int, view: RunView, experiment: str) -> dict[str, Any]:
    """One cell of the run as a Benchmark Report (a dict of the schema's fields)."""
    manifest = view.manifest
    found: dict[str, Any] = {
        "version": VERSION,
        "run": {"uid": str(uuid.uuid5(uuid.UUID(experiment), f"{view.label}/{cell.name}")), "eid": experiment,
                "time": {"start": _instant(cell.started_at), "end": _instant(cell.ended_at),
                         "duration": f"PT{cell.duration_s:.3f}S"},
                "description": f"{manifest.get('model') or 'model'} [{view.label}/{cell.name}]"},
        "scenario": {"load": _load(cell, stage, manifest)},
        "results": _present({"request_performance": {"aggregate": _aggregate(cell)},
                             "session_performance": _session_performance(cell),
                             "observability": _observability(cell, view)}),
    }
    stack = _stack(view)
    if stack:
        found["scenario"]["stack"] = stack
    return found


def _experiment_id(view: RunView) -> str:
    """The run's experiment ID: a UUID5 of what names the run (llm-d's `run.eid`)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{TOOL}:{view.label}:{view.manifest.get('started_at', '')}"))


def _stack(view: RunView) -> list[dict[str, Any]]:
    """The server the manifest names, as one generic component; none where it names none."""
    server = view.manifest.get("server")
    if not isinstance(server, dict) or not server.get("kind"):
        return []
    launch = server.get("launch") if isinstance(server.get("launch"), dict) else None
    return [{
        "metadata": {"schema_version": "0.0.1", "label": _server_label(view), "cfg_id": _config_id(launch or server),
                     "description": f"{server['kind']} serving {view.manifest.get('model')}"},
        "standardized": {"kind": "generic", "tool": str(server["kind"]),
                         "tool_version": str(server.get("version") or "unknown"),
                         "model": {"name": str(view.manifest.get("model"))}},
        "native": {"args": launch},
    }]


def _server_label(view: RunView) -> str:
    """The server's label in the stack, which its observability entries name."""
    return (view.manifest.get("target") or {}).get("label") or "server"


def _load(cell: CellRequests, stage: int, manifest: dict[str, Any]) -> dict[str, Any]:
    records = cell.records
    rate = cell.scheduled_rate()
    config = manifest.get("profile") or manifest.get("protocol")
    standardized: dict[str, Any] = {
        "tool": TOOL, "tool_version": str((manifest.get("tool") or {}).get("version") or "unknown"),
        "parallelism": int((manifest.get("protocol") or {}).get("processes") or 1),
        "source": "sampled",  # prompts are texts (the scenarios'), not random tokens
        "stage": stage,
        "input_seq_len": _lengths(cell.ok["prompt_tokens"].to_numpy(dtype="float64")),
    }
    if rate is not None:
        standardized["rate_qps"] = rate
    else:
        standardized["concurrency"] = int(records["concurrency"].max())
    turns = records["turn"].dropna()
    if len(turns):  # its conversations' longest, in requests (a record names its turn, not its conversation)
        longest = int(turns.max()) + 1
        standardized["multi_turn"] = {"enabled": True, "max_turns": {"distribution": "other", "value": longest,
                                                                     "max": longest}}
    case, streams = records["case"].iloc[0], int(records["concurrency"].max())
    return {"metadata": {"schema_version": "0.0.1", "cfg_id": _config_id(config),
                         "description": f"{cell.name}: case {case}, {streams} stream{'s' * (streams != 1)}"},
            "standardized": standardized,
            "native": {"args": {"command": manifest.get("command")}, "config": config}}


def _lengths(values: np.ndarray) -> dict[str, Any]:
    """A SequenceLength: fixed where every value is one, else "other" with mean, spread and range."""
    values = values[np.isfinite(values)]
    if not len(values):
        return {"distribution": "other", "value": 0}
    if values.min() == values.max():
        return {"distribution": "fixed", "value": int(values[0])}
    return {"distribution": "other", "value": float(values.mean()), "std_dev": float(values.std()),
            "min": int(values.min()), "max": int(values.max())}


def _aggregate(cell: CellRequests) -> dict[str, Any]:
    ok = cell.ok
    requests = {"total": len(cell.records), "failures": cell.failed,
                "input_length": _statistics(ok["prompt_tokens"], "count"),
                "output_length": _statistics(ok["completion_tokens"], "count")}
    latency = {"time_to_first_token": _statistics(ok["ttft_s"], "s"),
               "time_per_output_token": _statistics(cell.tpot_s, "s/token"),
               "normalized_time_per_output_token": _statistics(cell.ntpot_s, "s/token"),
               "request_latency": _statistics(ok["total_s"], "s")}
    rates = {"input_token_rate": (cell.input_tokens, "tokens/s"), "output_token_rate": (cell.output_tokens, "tokens/s"),
             "total_token_rate": (cell.input_tokens + cell.output_tokens, "tokens/s"),
             "request_rate": (cell.completed, "queries/s")}
    throughput = {name: {"units": units, "mean": cell.per_second(count)} for name, (count, units) in rates.items()
                  if cell.per_second(count) is not None}
    return {"requests": _present(requests), "latency": _present(latency), "throughput": throughput}


def _session_performance(cell: CellRequests) -> dict[str, Any] | None:
    """The cell's agent sessions as a SessionPerformance; None for a cell without sessions."""
    sessions = sessions_table(cell.records)
    if sessions.empty:
        return None
    failed = int((sessions["turns_failed"] > 0).sum())
    rate = cell.per_second(len(sessions))
    return {"sessions": _present({
        "total": len(sessions), "succeeded": len(sessions) - failed, "failed": failed,
        "total_events": int(sessions["turns"].sum()),
        "total_events_completed": int(sessions["turns"].sum() - sessions["turns_failed"].sum()),
        "session_rate": {"units": "queries/s", "mean": rate} if rate is not None else None,
        "session_duration": _statistics(sessions["duration_s"], "s"),
        "events_per_session": _statistics(sessions["turns"], "count"),
        "input_tokens_per_session": _statistics(sessions["prompt_tokens"], "count"),
        "output_tokens_per_session": _statistics(sessions["completion_tokens"], "count"),
    })}


def _observability(cell: CellRequests, view: RunView) -> dict[str, Any] | None:
    """What the run scraped of its server during the cell, as an Observability; None where nothing."""
    servers = view.once("llmd server cells", lambda: server_figures.server_cells(
        view.scrapes, view.records, (view.manifest.get("server") or {}).get("launch")))
    components = []
    for source in cell_server.source_figures(cell.name, view.scrapes, servers):
        rates = source.prefix_hit_rates
        hit = {"units": "fraction", "mean": float(np.mean(rates)),
               **({"min": min(rates), "max": max(rates)} if len(rates) > 1 else {})} if rates else None
        components.append((source.source, {
            "kv_cache_usage": _as_statistics(source.gauges["kv_use"], "fraction"), "cache_hit_rate": hit,
            "running_requests": _as_statistics(source.gauges["running"], "count"),
            "waiting_requests": _as_statistics(source.gauges["queued"], "count")}))
    power = cell_server.cell_power(cell.name, view.energy)
    if power is not None and power.mean_watts is not None:
        components.append((energy.GPU_SOURCE, {"power_consumption": _present(
            {"units": "Watts", "mean": power.mean_watts, "max": power.peak_watts})}))
    label = _server_label(view)
    found = [{"component_label": label, "replica_id": source, "aggregate": _present(aggregate)}
             for source, aggregate in components if _present(aggregate)]
    return {"components": found} if found else None


def _statistics(values: Any, units: str) -> dict[str, Any] | None:
    return _as_statistics(distribution(np.asarray(values, dtype="float64")), units)


def _as_statistics(found: dict[str, float] | None, units: str) -> dict[str, Any] | None:
    """A distribution (`cell_requests.distribution`) as a Statistics in `units`."""
    if found is None:
        return None
    return {"units": units, **{STAT_KEYS.get(key, f"p{key}"): value for key, value in found.items()}}


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def _config_id(config: Any) -> str:
    """A configuration's ID: a hash of it (llm-d's `cfg_id`)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _instant(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).isoformat()
