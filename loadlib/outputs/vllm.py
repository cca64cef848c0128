"""`vllm bench serve`'s result JSON, one per cell (`python -m analysis export RUN --format vllm`),
and such a result read back as a run (`read_result`: `compare` takes one as a side).

The keys are those `vllm bench serve --save-result --save-detailed` writes (vllm/benchmarks/serve.py:
the setup, the traffic, the counts and rates over the duration, `{mean,median,std,pN}_{ttft,tpot,
itl,e2el}_ms`, and the per-request arrays), each cell's figures by `loadlib.figures.cell_requests`
(its window is vLLM's duration). Where the journal cannot give vLLM's own figure the file says so
in `notes`, a key of its own (vLLM's `--metadata` adds such keys): the ITLs are the gaps the
client measured of a run with `--chunk-times`, else each request's mean chunk gap repeated
(`CellRequests.chunk_gaps_s`; the note says which), `start_times` are epoch seconds,
`generated_texts` are not kept.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pandas as pd

from loadlib.figures.cell_requests import CellRequests, distribution
from loadlib.figures.goodput import Slo
from loadlib.figures.headline import FIGURE_COLUMNS, LOWER, PublishedFigures
from loadlib.outputs import cell_files
from loadlib.record_table import records_frame
from loadlib.records import chunk_gaps_text
from loadlib.run_view import RunDirError, RunView

if TYPE_CHECKING:
    from loadlib.outputs import Reading

HELP = "vllm bench serve's result JSON, one file per cell, with the per-request arrays"
BACKEND = "openai-chat"  # vLLM's name for what the tool sends: streaming chat completions
METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "itl_s", "e2el": "total_s"}  # vLLM's name -> the cell's samples
ITLS = ("itls: per request, one gap per stream chunk after the first (as vLLM's: a chunk of k tokens is one gap; "
        "vLLM counts every chunk with choices, this tool those that carry output), summing to the time from the "
        "first chunk to the last")
MEASURED_GAPS = ("; each as the client measured it, as vLLM's are (--chunk-times: kernel receive stamps, to 0.01 ms; "
                 "chunks read in one socket read share a stamp, a gap of 0)")
MEAN_GAPS = ("; each is the request's mean gap: the records keep no stamp per chunk (--chunk-times keeps them), so "
             "mean_itl_ms is exact while the ITL's std and percentiles are of requests' mean gaps (a stall within a "
             "request is spread over its gaps); max_output_tokens_per_s counts chunks at those evenly spaced times")
MIXED_GAPS = ("; as the client measured them (--chunk-times) for {measured} of the {completed} successful requests, "
              "the request's mean gap repeated for the others (their records keep no stamp per chunk), so the ITL's "
              "std and percentiles mix the two")
NOTES = ("start_times: epoch seconds of each send; duration: the cell's first send to its last end",
         "generated_texts: not kept (the journal keeps each output's hash)")
DETAILED = ("ttfts", "latencies", "output_lens")  # a result with these arrays has its requests' samples


def render(reading: Reading) -> str:
    """Writes each cell's result of each view into the folder `reading.out` (a run of several
    servers: a folder per server); the files written, one a line with their counts."""
    return "\n".join(write(view, Path(reading.out)) for view in reading.views)


def write(view: RunView, out: Path) -> str:
    lines = []
    for path, _place, cell, server in cell_files(view, out):
        path.write_bytes(orjson.dumps(result(cell, server.manifest)))  # compact, as vLLM writes it
        lines.append(f"{path}  {cell.name}: {cell.completed} completed, {cell.failed} failed")
    return "\n".join(lines)


def result(cell: CellRequests, manifest: dict[str, Any]) -> dict[str, Any]:
    """The cell as one `vllm bench serve` result."""
    records, ok = cell.records, cell.records["ok"].to_numpy()
    rate = cell.scheduled_rate()
    found: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S", time.gmtime(cell.ended_at)),
        "endpoint_type": BACKEND, "backend": BACKEND, "label": cell.name,
        "model_id": manifest.get("model"), "tokenizer_id": None,  # the server counted the tokens
        "num_prompts": len(records),
        "request_rate": rate if rate is not None else "inf", "burstiness": _burstiness(rate, manifest),
        "max_concurrency": int(records["concurrency"].max()),
        "duration": cell.duration_s, "completed": cell.completed, "failed": cell.failed,
        "total_input_tokens": cell.input_tokens, "total_output_tokens": cell.output_tokens,
        "request_throughput": cell.per_second(cell.completed), "request_goodput": None,
        "output_throughput": cell.per_second(cell.output_tokens),
        "total_token_throughput": cell.per_second(cell.input_tokens + cell.output_tokens),
        "input_lens": _ints(records["prompt_tokens"]),
        "output_lens": _ints(records["completion_tokens"].where(ok)),
        "ttfts": _floats(records["ttft_s"].where(ok)),
        "itls": cell.chunk_gaps_s,
        "latencies": _floats(records["total_s"].where(ok)),
        "start_times": _floats(records["sent_at"]),
        "queue_times": _floats(records["queue_s"]),
        "errors": [error if isinstance(error, str) else "" for error in records["error"]],
        "max_output_tokens_per_s": cell.peak_chunks_per_s,
        "max_concurrent_requests": cell.most_in_flight,
        "notes": [itls_note(*cell.gaps_measured), *NOTES],
    }
    samples = {"ttft_s": cell.ok["ttft_s"].to_numpy(dtype="float64"), "tpot_s": cell.tpot_s,
               "itl_s": np.array([gap for gaps in cell.chunk_gaps_s for gap in gaps]),
               "total_s": cell.ok["total_s"].to_numpy(dtype="float64")}
    for metric, column in METRICS.items():
        stats = distribution(samples[column]) or {}
        found[f"mean_{metric}_ms"] = _ms(stats.get("mean"))
        found[f"median_{metric}_ms"] = _ms(stats.get("50"))
        found[f"std_{metric}_ms"] = _ms(stats.get("std"))
        for key, value in stats.items():
            if key not in ("mean", "std", "min", "max"):
                found[f"p{key}_{metric}_ms"] = _ms(value)
    return found


def itls_note(measured: int, completed: int) -> str:
    """What the itls are, by how many of the cell's successful requests had their gaps measured."""
    if not measured:
        return ITLS + MEAN_GAPS
    return ITLS + (MEASURED_GAPS if measured == completed else MIXED_GAPS.format(measured=measured, completed=completed))


def _burstiness(rate: float | None, manifest: dict[str, Any]) -> float | str:
    """vLLM's gamma shape of the gaps between arrivals: "inf" (vLLM's spelling, as for its rate) for
    evenly spaced arrivals, 1.0 for Poisson ones and where there are none (vLLM's default)."""
    arrival = (((manifest.get("profile") or {}).get("load") or {}).get("arrival"))
    return "inf" if rate is not None and arrival == "constant" else 1.0


def _ms(seconds: float | None) -> float:
    return 0.0 if seconds is None else seconds * 1000  # vLLM writes 0 for a figure of no sample


def _floats(values: pd.Series) -> list[float]:
    return [float(v) if math.isfinite(v) else 0.0 for v in values.to_numpy(dtype="float64")]  # vLLM's 0.0: none


def _ints(values: pd.Series) -> list[int]:
    return [int(v) for v in values.fillna(0).to_numpy(dtype="float64")]


# --- a result read back ------------------------------------------------------------------------------


def read_result(path: Path, label: str | None = None, goodput: Slo | None = None) -> RunView:
    """A `vllm bench serve` result JSON as a run of one free-running cell: named by the result's
    `label` (an exported cell's name), else `closed` (N streams: `max_concurrency` and no rate) or
    `open-Rrps` (arrivals at `request_rate`). With its per-request arrays (`--save-detailed`) its
    requests are records and every figure has its interval; without them its TTFT median and p99
    are figures published without samples (`PublishedFigures`). Raises `RunDirError` naming the
    file where it is not such a result. `goodput`: its targets (default: `goodput_slo`'s)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError:
        raise RunDirError(f"{path}: neither a run directory nor a vllm bench serve result JSON (not JSON)") from None
    if not (isinstance(data, dict) and isinstance(data.get("completed"), int) and "request_throughput" in data):
        raise RunDirError(f"{path}: neither a run directory nor a vllm bench serve result JSON "
                          "(no completed and request_throughput)")
    rate = data.get("request_rate")
    scheduled = isinstance(rate, (int, float)) and math.isfinite(rate)
    cell = str(data.get("label") or (f"open-{rate:g}rps" if scheduled else "closed"))
    manifest = {"tool": {"name": "vllm bench serve", "backend": data.get("backend")}, "model": data.get("model_id"),
                "vllm_result": {key: data.get(key) for key in ("date", "num_prompts", "request_rate", "burstiness",
                                                               "max_concurrency", "duration")}}
    name = label or path.stem
    if not all(isinstance(data.get(key), list) for key in DETAILED):
        return RunView(records_frame([]), manifest, None, name, goodput=goodput, published=_published(data, cell))
    return RunView(_records(data, cell, scheduled), manifest, None, name, goodput=goodput)


def _gaps_measured(data: dict[str, Any]) -> bool:
    """Whether the result's itls are gaps as measured: vLLM's own are; this tool's only where its
    note says so (`itls_note`)."""
    notes = data.get("notes")
    return not (isinstance(notes, list) and any(isinstance(note, str) and note.startswith(ITLS)
                                                and note != ITLS + MEASURED_GAPS for note in notes))


def _records(data: dict[str, Any], cell: str, scheduled: bool) -> pd.DataFrame:
    """The result's requests as records (`loadlib.record_table.records_frame`), with their chunk
    gaps where the itls are measured ones."""
    ttfts, latencies, outputs = (data[key] for key in DETAILED)
    count = len(ttfts)
    inputs, itls = data.get("input_lens") or [None] * count, data.get("itls") or [[]] * count
    errors, queues = data.get("errors") or [None] * count, data.get("queue_times") or [None] * count
    starts = data.get("start_times") or list(np.cumsum([0.0, *latencies[:-1]]))  # sent one after another
    concurrency = int(data.get("max_concurrency") or count)
    measured = _gaps_measured(data)
    records = []
    for i in range(count):
        ok = not errors[i] and (outputs[i] or ttfts[i])
        sent, queue = float(starts[i]), queues[i]
        records.append({
            "request_id": f"vllm-{i}", "scenario": "vllm", "cell": cell, "case": "open" if scheduled else "closed",
            "concurrency": concurrency, "round": 0, "slot": 0, "worker": 0, "user": 0,
            "closed_loop": not scheduled, "scheduled_at": sent - queue if scheduled and queue is not None else None,
            "queue_s": queue if scheduled else None, "sent_at": sent,
            "ttft_s": ttfts[i] if ok else None, "total_s": latencies[i] if ok else None,
            "last_chunk_s": ttfts[i] + sum(itls[i]) if ok else None, "chunks": len(itls[i]) + 1 if ok else 0,
            "chunk_gaps_ms": chunk_gaps_text([0.0, *np.cumsum(itls[i]).tolist()]) if ok and measured else None,
            "completion_tokens": outputs[i] if ok else None, "prompt_tokens": inputs[i],
            "error": None if ok else (errors[i] or "failed"),
        })
    return records_frame(records)


def _published(data: dict[str, Any], cell: str) -> PublishedFigures:
    """The TTFT median and p99 of a result without its per-request arrays, each with its count."""
    rows = [(f"{cell} TTFT p{q} s", data.get(key)) for q, key in (("50", "median_ttft_ms"), ("99", "p99_ttft_ms"))]
    figures = pd.DataFrame([{"figure": figure, "value": value / 1000, "low": np.nan, "high": np.nan,
                             "n": float(data["completed"]), "misleads": False, "better": LOWER}
                            for figure, value in rows if isinstance(value, (int, float))], columns=FIGURE_COLUMNS)
    return PublishedFigures(figures, "a vllm bench serve result without its per-request arrays "
                                     "(--save-detailed): figures from its summary, no interval, no verdict")
