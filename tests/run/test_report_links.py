"""Where a run's report.html is found once the run has ended: the web UI's uni-bench tab (its
address: Locust's tables show text), its Download Data list and the /uni/ page link to it, and the
link serves the page of that run. Real Locust with its web UI, the
built-in simulator, Debian's Chromium."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from loadlib.records import read_records
from tests.conftest import FAST_SIM, TINY_ROUNDS
from tests.run.test_webui import ARTIFACTS, chromium_page, started_web_locust, tab_rows



def wait_for_report_page(url: str, timeout: float = 30.0) -> None:
    """Until the tab's figures say the run's end has written report.html."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url + "uni/figures.json", timeout=5) as reply:
            if json.load(reply)["report_page"]:
                return
        time.sleep(0.3)
    pytest.fail("the run did not end with a report.html within 30 s")


@pytest.mark.processes
def test_the_web_ui_links_to_the_runs_report_html_once_it_has_ended(tmp_path):
    (tmp_path / "tiny.toml").write_text(TINY_ROUNDS, encoding="utf-8")
    with started_web_locust(tmp_path, "--profile", "tiny.toml", "--autostart", "-u", "2", "--sim-args", FAST_SIM,
                            workers=0) as (url, run_dir):
        wait_for_report_page(url)
        link = f"{url}uni/report.html"
        ARTIFACTS.mkdir(exist_ok=True)
        with chromium_page() as page:
            page.goto(url)
            page.get_by_role("tab", name="uni-bench").click()
            row = page.get_by_text("The run's report.html (to open or share)")
            row.wait_for()
            assert row.inner_text().endswith(link)
            page.screenshot(path=ARTIFACTS / "webui-tab-report-link.png", full_page=True)
            assert any(name.startswith("The run's report.html") for name in tab_rows(page))
            page.get_by_role("tab", name="Download Data").click()  # Locust's own list of the run's files
            listed = page.get_by_role("link", name="uni-bench report.html", exact=False)
            assert listed.get_attribute("href") == "./uni/report.html"
            page.screenshot(path=ARTIFACTS / "webui-download-data-report-link.png")

            page.goto(url + "uni/")
            anchor = page.locator("#report-page")
            anchor.wait_for(state="visible")
            page.screenshot(path=ARTIFACTS / "webui-live-page-report-link.png")
            with page.expect_navigation():
                anchor.click()
            assert page.url == link
            page.wait_for_selector("body[data-rendered=yes]")  # the page's own script ran, served over HTTP
            shown = page.evaluate("JSON.parse(document.getElementById('report-data').textContent)")
        reply = urllib.request.urlopen(link, timeout=10)
        body = reply.read().decode("utf-8")
    assert reply.status == 200 and reply.headers.get_content_type() == "text/html"
    assert body == (run_dir / "report.html").read_text(encoding="utf-8")
    ids = {record["request_id"] for record in read_records(run_dir)}
    assert len(ids) == 2 + 2 * 2 * 2 and set(shown["runs"][0]["requests"]["columns"]["request_id"]) == ids
