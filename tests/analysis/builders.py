"""Hand-built records and runs: every field a real record has, only the figures a test needs set."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from loadlib.figures.goodput import goodput_slo
from loadlib.record_table import records_frame
from loadlib.run_view import RunView

_ids = itertools.count()


def build_record(cell: str = "single", scenario: str = "code", round: int = 0, slot: int = 0, *,
                 ttft_s: float | None = 0.1, total_s: float | None = 1.1, comp: int | None = 101,
                 chunks: int = 25, error: str | None = None, sent_at: float = 1_700_000_000.0,
                 **fields: Any) -> dict[str, Any]:
    """A record dict as `RequestRecord.to_json` writes it; the cell decides concurrency and case."""
    if cell == "single":
        concurrency, case = 1, "single"
    elif cell.startswith("c") and "-" in cell:
        head, case = cell.split("-", 1)
        concurrency = int(head[1:])
    else:
        concurrency, case = fields.pop("concurrency", 1), fields.pop("case", cell)
    record = {
        "request_id": f"req-{next(_ids)}", "scenario": scenario, "cell": cell,
        "concurrency": concurrency, "case": case, "round": round, "slot": slot, "worker": 0,
        "user": slot, "sent_at": sent_at, "ttft_s": ttft_s, "total_s": total_s,
        "last_chunk_s": total_s, "completion_tokens": comp, "prompt_tokens": 40,
        "cached_tokens": 0, "chunks": chunks, "finish_reason": "length", "http_status": 200,
        "error": error, "output_sha": f"sha-{scenario}", "max_tokens": 512, "thinking": False,
    }
    record.update(fields)
    return record


def build_run(records: list[dict[str, Any]], label: str = "run", manifest: dict[str, Any] | None = None,
              slo_ttft_s: float | None = None, slo_decode_tps: float | None = None) -> RunView:
    """A run's view, as `read_run` would give it (a directory of no files), straight from record dicts."""
    return RunView(records_frame(records), manifest or {}, Path(label), label,
                   goodput=goodput_slo(manifest or {}, slo_ttft_s, slo_decode_tps))


def protocol_run() -> list[dict[str, Any]]:
    """A small protocol run whose figures were computed by hand (see the comments).

    single code: decode 200, 250, 160 -> mean 203.33, range 160-250, TTFT 0.2, tok/chunk 4.01
    single cn_essay: decode 100, 50 (third round has no usage) -> 75.0, range 50-100, TTFT 0.6
    c2-same: rounds 400/2.0 = 200 and 400/1.0 = 400 -> 300, overlap 300/203.33 = 1.48x
    c2-different: round 0 300/1.5 = 200; round 1 lost a stream to HTTP 500 -> n 1
    """
    r = build_record
    return [
        r(round=0, ttft_s=0.1, total_s=2.1, comp=401, chunks=100),
        r(round=1, ttft_s=0.2, total_s=1.8, comp=401, chunks=100),
        r(round=2, ttft_s=0.3, total_s=2.8, comp=401, chunks=100),
        r(scenario="cn_essay", round=0, ttft_s=0.5, total_s=1.5, comp=101, chunks=50),
        r(scenario="cn_essay", round=1, ttft_s=0.7, total_s=2.7, comp=101, chunks=50),
        r(scenario="cn_essay", round=2, ttft_s=0.6, total_s=3.0, comp=None, error="no_usage"),
        r("c2-same", round=0, slot=0, ttft_s=0.1, total_s=2.1, comp=201),
        r("c2-same", round=0, slot=1, ttft_s=0.2, total_s=1.2, comp=201),
        r("c2-same", round=1, slot=0, ttft_s=0.1, total_s=1.1, comp=201),
        r("c2-same", round=1, slot=1, ttft_s=0.1, total_s=1.1, comp=201),
        r("c2-different", round=0, slot=0, ttft_s=0.1, total_s=1.6, comp=151),
        r("c2-different", round=0, slot=1, scenario="code_b", ttft_s=0.1, total_s=1.1, comp=151),
        r("c2-different", round=1, slot=0, ttft_s=0.1, total_s=1.6, comp=151),
        r("c2-different", round=1, slot=1, scenario="code_b", ttft_s=None, total_s=0.2, comp=None,
          error="http_500", http_status=500),
    ]


def extended_run() -> list[dict[str, Any]]:
    """Beyond the protocol run: staggered starts, mixed cache states, a free-running cell.

    c2-different round 0 is staggered: slot 1 starts 1 s late, so the protocol's aggregate is
    400/2.0 = 200 t/s while the wall-clock window gives 400/3.0 = 133.3 t/s.
    c2-same has one stream served from the radix cache (1000 of 2000 prompt tokens: 50%).
    single code: round 0 cold (1000 tokens in 0.5 s: 2000 t/s), rounds 1-2 hit 900 cached tokens
    (TTFT 0.05 s: 20000 t/s apparent, 2000 t/s uncached).
    """
    r = build_record
    t0 = 1_700_000_000.0
    return [
        r(round=0, ttft_s=0.5, total_s=2.5, comp=201, chunks=50, prompt_tokens=1000, cached_tokens=0),
        r(round=1, ttft_s=0.05, total_s=2.05, comp=201, chunks=50, prompt_tokens=1000, cached_tokens=900),
        r(round=2, ttft_s=0.05, total_s=2.05, comp=201, chunks=50, prompt_tokens=1000, cached_tokens=900),
        r("c2-same", slot=0, ttft_s=0.5, total_s=2.5, comp=201, prompt_tokens=1000, cached_tokens=0),
        r("c2-same", slot=1, ttft_s=0.5, total_s=2.5, comp=201, prompt_tokens=1000, cached_tokens=1000),
        r("c2-different", slot=0, sent_at=t0, ttft_s=0.5, total_s=2.5, comp=201),
        r("c2-different", slot=1, sent_at=t0 + 1.0, ttft_s=0.5, total_s=2.5, comp=201, scenario="code_b"),
        r("c2-different", round=1, slot=0, ttft_s=0.5, total_s=2.5, comp=201),
        r("c2-different", round=1, slot=1, comp=None, error="no_usage", scenario="code_b"),
    ]


def free_running_records() -> list[dict[str, Any]]:
    """Two closed-loop users, each request 2 s (TTFT 0.5 s, 150 decode tokens = 100 t/s), one slow
    request (20 decode tokens) and one failure: steady window [1, 6.2] (see tests/test_metrics.py)."""
    t0 = 1_700_000_000.0

    def r(start, comp=151, error=None, total=2.0, ttft=0.5):
        return build_record("steady", sent_at=t0 + start, ttft_s=ttft, total_s=total, comp=comp, error=error,
                            concurrency=2, case="steady")
    return [r(0), r(2), r(4), r(6, comp=None, error="http_500", total=0.2, ttft=None), r(1), r(3, comp=21), r(5)]


def profile_run() -> list[dict[str, Any]]:
    """Cells a profile adds, with the cache state each meant and met and a conversation's turns.

    prefill-3k: meant cold and met cold (only the template's 20 framing tokens cached).
    c2-radix-hit: meant warm; slot 0 met it (all 1,000 prompt tokens cached), slot 1 got only the
    framing: MISSED. cached prompt = (1000 + 20) / 2000 = 51%.
    chat: turn 0 (500 prompt tokens, TTFT 0.2 s), turn 1 resends it (1,000 tokens, 500 cached,
    TTFT 0.1 s): prefill 2,500 t/s cold, 10,000 t/s with the hit, 5,000 t/s uncached.
    """
    r = build_record
    return [
        r("prefill-3k", "long-context-3k", ttft_s=1.5, total_s=2.5, prompt_tokens=3000, cached_tokens=20,
          cache_intended="cold", cache_observed="cold", case="single"),
        r("c2-radix-hit", "radix-hit", slot=0, prompt_tokens=1000, cached_tokens=1000, cache_intended="warm",
          cache_observed="warm", case="same"),
        r("c2-radix-hit", "radix-hit", slot=1, prompt_tokens=1000, cached_tokens=20, cache_intended="warm",
          cache_observed="cold", case="same"),
        r(scenario="chat", ttft_s=0.2, total_s=1.2, prompt_tokens=500, cached_tokens=20, cache_observed="cold", turn=0),
        r(scenario="chat", ttft_s=0.1, total_s=1.1, prompt_tokens=1000, cached_tokens=500, cache_observed="warm",
          turn=1),
    ]


def sglang_scrapes(cell: str, case: str, started_at: float, ended_at: float, accept_length: float) -> list[dict[str, Any]]:
    """The start and end scrapes of one cell as `metrics.jsonl` keeps them: SGLang's accept-length
    gauge moves from 1.0 (before the cell) to `accept_length`."""
    def scrape(phase: str, t: float, accept: float) -> dict[str, Any]:
        return {"t": t, "source": "target", "url": "http://127.0.0.1:30000/metrics", "phase": phase,
                "cell_index": 0, "cell": cell, "case": case, "error": None,
                "text": f"# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length {accept}\n"}
    return [scrape("start", started_at, 1.0), scrape("end", ended_at, accept_length)]


def session_records() -> list[dict[str, Any]]:
    """Two agent sessions on two lanes: lane 0's main agent twice, 1 s apart; lane 1's main agent, then
    two sub-agents together (ideal 960 of 1,000 prompt tokens each, 900 cached)."""
    t0 = 1_700_000_000.0

    def r(start, lane, conversation, agent="main", turn=0):
        return build_record("sessions-u2", "agent", slot=lane, sent_at=t0 + start, ttft_s=0.2, total_s=1.0,
                            concurrency=2, case="sessions", kind="agent-trace", conversation=conversation, copy=0,
                            agent=agent, turn=turn, prompt_tokens=1000, cached_tokens=900, ideal_cached_tokens=960)
    return [r(0, 0, "a"), r(2, 0, "a", turn=1), r(0.5, 1, "b"), r(1.6, 1, "b", "s1"), r(1.7, 1, "b", "s2")]
