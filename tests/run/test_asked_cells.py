"""What is asked is what runs: a `--concurrency` that -u cannot run is refused in one line (exit 2),
and a profile's cells (or the default concurrency's) above -u are not run with a line in the log,
the manifest and the summary's first lines, never dropped in silence. Real headless runs."""

from __future__ import annotations

import orjson
import pytest

from tests.conftest import FAST_SIM, run_locust_together

SMALL = ["--rounds", "1", "--scenarios", "code", "--max-tokens", "32"]
ROUNDS_2_8 = """
[request]
max_tokens = 32
[load]
mode = "rounds"
rounds = 1
concurrency = [2, 8]
[scenarios.protocol]
single = ["code"]
"""
LADDER_2_8 = """
[request]
max_tokens = 32
[load]
mode = "ladder"
levels = [2, 8]
warmup_s = 0.2
duration_s = 0.5
[scenarios.distinct-issues]
"""


@pytest.mark.processes
def test_cells_beyond_u_are_refused_when_typed_and_said_when_a_profile_or_the_default_has_them(tmp_path):
    (tmp_path / "rounds.toml").write_text(ROUNDS_2_8, encoding="utf-8")
    (tmp_path / "ladder.toml").write_text(LADDER_2_8, encoding="utf-8")
    sim = ["--sim-args", FAST_SIM]
    runs = {
        "typed": (["--headless", "-u", "4", "--concurrency", "2,8", *SMALL, *sim, "--run-dir", str(tmp_path / "t")],
                  tmp_path),
        "default": (["--headless", "-u", "2", *SMALL, *sim, "--run-dir", str(tmp_path / "d")], tmp_path),
        "rounds profile": (["--headless", "-u", "4", "--profile", "rounds.toml", *sim,
                            "--run-dir", str(tmp_path / "r")], tmp_path),
        "ladder profile": (["--headless", "-u", "4", "--profile", "ladder.toml", *sim,
                            "--run-dir", str(tmp_path / "l")], tmp_path),
    }
    results = run_locust_together(runs, timeout=120)

    typed = results["typed"]
    errors = [line for line in typed.stderr.splitlines() if "ERROR" in line]
    assert typed.returncode == 2 and "Traceback" not in typed.stderr, typed.stderr[-3000:]
    assert len(errors) == 1 and errors[0].endswith("error: --concurrency 8 needs 8 users, -u is 4: give -u 8 or more")
    assert not (tmp_path / "t" / "records.jsonl").exists()

    for name, run_dir, said, ran in (
            ("default", "d", "the 4- and 8-stream cells of the default concurrency 2,4,8 (-u is 2: give -u 8 to run them)",
             [2]),
            ("rounds profile", "r", "the 8-stream cells of rounds.toml's load.concurrency (-u is 4: give -u 8 to run them)",
             [2]),
            ("ladder profile", "l", "the 8-stream cells of ladder.toml's load.levels (-u is 4: give -u 8 to run them)",
             None)):
        result = results[name]
        assert result.returncode == 0 and "Traceback" not in result.stderr, (name, result.stderr[-3000:])
        assert result.stderr.count(f"WARNING/uni-bench: not run: {said}") == 1, (name, result.stderr[-3000:])
        assert f"\nNOT RUN: {said}\n" in result.stdout[:2000], (name, result.stdout[:2000])
        manifest = orjson.loads((tmp_path / run_dir / "manifest.json").read_bytes())
        assert manifest["not_run"] == said
        if ran is not None:
            assert manifest["protocol"]["concurrency"] == ran
