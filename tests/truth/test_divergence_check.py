"""The accept-length check between the server's gauge and the client's tok/chunk: no false
alarm on the simulator's four protocol scenarios (no chunk merging), a flag when SGLang's
--stream-interval merges steps; real headless Locust against the simulator."""

from __future__ import annotations

import pytest

from analysis.report import run_report
from loadlib.report.document import rows
from loadlib.run_view import read_run
from loadlib.truth import server_figures
from tests.conftest import FAST_SIM, run_locust_together

# about three scrapes per single-stream cell, as the default 5 s interval gives at full time scale
RUN = ["--headless", "--rounds", "3", "--concurrency", "2", "-u", "2", "--metrics-interval", "0.25",
       "--loglevel", "WARNING"]


def server_cells(run_dir):
    tables = {section.key: rows(section.data) for section in run_report([read_run(run_dir)]).sections}
    return tables["server_cells"], tables["server_divergence"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The three runs, started together: on the simulator as it is (name None), and with SGLang's
    --stream-interval 2 and 4 merging that many steps per chunk."""
    work = tmp_path_factory.mktemp("divergence")
    plain = ([*RUN, "--run-dir", str(work / "plain"), "--sim-args", FAST_SIM], work)
    merged = {interval: ([*RUN, "--scenarios", "code,cn_essay", "--run-dir", str(work / f"merged{interval}"),
                          "--sim-args", f"{FAST_SIM} --stream-interval {interval}"], work) for interval in (2, 4)}
    results = run_locust_together({None: plain, **merged})
    return {name: (result, work / ("plain" if name is None else f"merged{name}")) for name, result in results.items()}


@pytest.mark.processes
def test_no_divergence_is_flagged_where_nothing_merges_chunks(runs):
    result, run_dir = runs[None]
    assert result.returncode == 0, result.stderr[-3000:]
    cells, flagged = server_cells(run_dir)
    assert {row["scenario"] for row in cells if row["cell"] == "single"} == {"code", "en_tech", "cn_chat", "cn_essay"}
    assert flagged == []
    for row in cells:
        assert row["accept_basis"] == "gauge" and abs(row["divergence"]) <= server_figures.GAUGE_LIMIT


@pytest.mark.processes
@pytest.mark.parametrize("interval", [2, 4])
def test_merged_steps_are_still_flagged(runs, interval):
    result, run_dir = runs[interval]
    assert result.returncode == 0, result.stderr[-3000:]
    cells, flagged = server_cells(run_dir)
    assert len(flagged) == len(cells) > 0
    assert all(row["divergence"] > 0.7 * (interval - 1) for row in flagged)  # about `interval` steps a chunk
