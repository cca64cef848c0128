"""Issue 35 item 10: the README's printed summary is what its first command prints now (on the
simulator, 20 times faster): every line of the sample, numbers and addresses masked."""

from __future__ import annotations

import pytest

from tests.conftest import run_locust
from tests.readme_samples import headings, missing_lines, sample_after

MAIN_COMMAND = "locust -f locustfiles/dflash.py --headless -u 8 "


def test_the_readme_shows_a_sample_after_each_of_its_printing_commands():
    main = sample_after(MAIN_COMMAND)
    assert main[0].startswith("uni-bench summary:") and len(headings(main)) >= 6
    assert headings(sample_after("--profile profiles/ab-sim.toml"))[0].startswith("Verdicts against A (")
    assert headings(sample_after("--profile profiles/sweep-sim.toml"))[0].split()[:2] == ["configuration", "status"]


@pytest.mark.processes
def test_the_main_commands_sample_is_what_it_prints_now(tmp_path):
    result = run_locust(["--headless", "-u", "8", "--sim-args", "--time-scale 0.02"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert missing_lines(sample_after(MAIN_COMMAND), result.stdout) == [], result.stdout
