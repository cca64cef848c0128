"""Hand-built records: every field a real record has, with only the figures a test cares about set."""

from __future__ import annotations

import itertools
from typing import Any, Callable

import pytest

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


@pytest.fixture
def make_record() -> Callable[..., dict[str, Any]]:
    return build_record


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


@pytest.fixture
def protocol_records() -> list[dict[str, Any]]:
    return protocol_run()


@pytest.fixture
def write_run(tmp_path):
    """Writes records (and a manifest) as a run directory the way the client does."""
    import json

    import orjson

    def write(records: list[dict[str, Any]], manifest: dict[str, Any] | None = None,
              name: str = "run", tail: bytes = b""):
        run_dir = tmp_path / name
        run_dir.mkdir()
        (run_dir / "records.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records) + tail)
        if manifest is not None:
            (run_dir / "manifest.json").write_text(json.dumps(manifest))
        return run_dir

    return write
