"""llm-d's Benchmark Report, version 0.2.1, one per cell (`python -m analysis export RUN --format llmd`).

A report describes one point of an experiment (llm-d-benchmark's docs/benchmark_report.md): here
one cell, its `scenario.load.standardized.stage` the cell's place in the run; the reports of one
run share `run.eid`. `scenario.stack` is the server the manifest names (a generic component: its
kind, version, model and launch flags), `scenario.load` the cell's workload (this tool, the
prompts' lengths, the cell's streams or arrival rate, the run's command and profile), and
`results.request_performance.aggregate` the cell's requests, latencies and rates
(`loadlib.figures.cell_requests`; each statistic with llm-d's percentiles p0p1 ... p99p9).
Written as JSON, which llm-d reads as YAML. Left out: the ITL (the journal keeps each request's
mean chunk gap, not a gap per token), `session_performance`, `observability`.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from loadlib.figures.cell_requests import CellRequests, distribution
from loadlib.outputs import cell_files

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
        path.write_text(json.dumps(report(cell, stage, server, experiment), indent=2), encoding="utf-8")
        count = len(cell.records)
        lines.append(f"{path}  stage {stage} {cell.name}: {count} request{'s' * (count != 1)}, {cell.failed} failed")
    return "\n".join(lines)


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
        "results": {"request_performance": {"aggregate": _aggregate(cell)}},
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
    label = (view.manifest.get("target") or {}).get("label") or "server"
    return [{
        "metadata": {"schema_version": "0.0.1", "label": label, "cfg_id": _config_id(launch or server),
                     "description": f"{server['kind']} serving {view.manifest.get('model')}"},
        "standardized": {"kind": "generic", "tool": str(server["kind"]),
                         "tool_version": str(server.get("version") or "unknown"),
                         "model": {"name": str(view.manifest.get("model"))}},
        "native": {"args": launch},
    }]


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


def _statistics(values: Any, units: str) -> dict[str, Any] | None:
    found = distribution(np.asarray(values, dtype="float64"))
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
