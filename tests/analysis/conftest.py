"""Fixtures for the analysis tests: hand-built records and run directories written like the client's."""

from __future__ import annotations

import json
from typing import Any, Callable

import orjson
import pytest

from tests.analysis.builders import build_record, protocol_run


@pytest.fixture
def make_record() -> Callable[..., dict[str, Any]]:
    return build_record


@pytest.fixture
def protocol_records() -> list[dict[str, Any]]:
    return protocol_run()


@pytest.fixture
def write_run(tmp_path):
    """Writes records (and a manifest) as a run directory the way the client does."""

    def write(records: list[dict[str, Any]], manifest: dict[str, Any] | None = None,
              name: str = "run", tail: bytes = b""):
        run_dir = tmp_path / name
        run_dir.mkdir()
        (run_dir / "records.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records) + tail)
        if manifest is not None:
            (run_dir / "manifest.json").write_text(json.dumps(manifest))
        return run_dir

    return write
