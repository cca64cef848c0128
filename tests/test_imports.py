"""What each kind of process imports, in a fresh interpreter: a locustfile (every Locust worker
loads it) loads no tables and no report, which only the coordinating process needs at the run's
end; `python -m analysis` loads none of the live run's machinery. Each process of a test run pays
its imports, so these keep the suite and every real run quick to start."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import LOCUSTFILE

# Locust itself is imported first, as its command line does (it patches the standard library).
IMPORTS = {"locustfile": f"import locust, runpy; runpy.run_path({str(LOCUSTFILE)!r})",
           "analysis": "import analysis.__main__"}


@pytest.fixture(scope="module")
def loaded() -> dict[str, list[str]]:
    """Per process kind, the modules its imports loaded."""
    out = {}
    for kind, code in IMPORTS.items():
        done = subprocess.run([sys.executable, "-c", f"{code}; import json, sys; print(json.dumps(sorted(sys.modules)))"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        out[kind] = json.loads(done.stdout.splitlines()[-1])
    return out


def _of(modules: list[str], package: str) -> list[str]:
    return [m for m in modules if m == package or m.startswith(package + ".")]


@pytest.mark.processes
@pytest.mark.parametrize("package", [
    "loadlib.report", "loadlib.run.session", "loadlib.run.summary_files", "loadlib.run.webui", "loadlib.run.llmstats",
    "matplotlib", "pandas", "pyarrow"])
def test_a_locustfile_loads_no_tables_and_no_report(loaded, package):
    assert "loadlib.run.wiring" in loaded["locustfile"]
    assert _of(loaded["locustfile"], package) == []


@pytest.mark.processes
@pytest.mark.parametrize("package", [
    "gevent", "locust", "loadlib.wire.connection", "loadlib.modes.base", "loadlib.scenarios.registry", "pydantic"])
def test_the_post_processor_loads_nothing_of_the_live_run(loaded, package):
    assert "loadlib.report.contents" in loaded["analysis"]
    assert _of(loaded["analysis"], package) == []
