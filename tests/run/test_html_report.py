"""Locust's `--html` report with the tool's summary in it, opened in Debian's headless Chromium with
the network blocked: it renders without a console or page error, and shows both Locust's own
statistics and the tool's LLM figures, and links to the run's report.html, which opens beside it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import locust
import pytest

from loadlib.run.llmstats import add_to_html_report
from tests.conftest import FAST_SIM
from tests.run.test_webui import chromium_page

LOCUST_ASSETS = Path(locust.__file__).parent / "webui" / "dist" / "assets"

# A stats name that would end Locust's inlined script, its body or the summary's <pre> if it
# reached the page unescaped: it goes through Locust's tables and the tool's summary alike.
HOSTILE = "</script></pre></body><b id=\"injected\">x</b>'\""
LOCUSTFILE = f"""
from locust import constant, task
from loadlib import LLMUser


class Chat(LLMUser):
    wait_time = constant(0.2)

    @task(3)
    def short_answer(self):
        self.chat([{{"role": "user", "content": "Name three prime numbers."}}], name="short", max_tokens=32)

    @task
    def hostile(self):
        self.chat([{{"role": "user", "content": "Explain TCP slow start."}}], name={HOSTILE!r}, max_tokens=32)
"""


def open_report(page: Any, report: Path) -> list[str]:
    """Loads `report` with every non-file request aborted; returns the console errors and page
    errors seen once it has loaded (the list keeps growing while the page runs)."""
    errors: list[str] = []
    page.on("console", lambda message: errors.append(f"console: {message.text}") if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    page.route("**/*", serve_files_only)
    page.goto(report.resolve().as_uri())
    page.wait_for_load_state("load")
    return errors


def serve_files_only(route: Any) -> None:
    """No network; Locust's icon, which its report links at `../../assets/` (where its web UI
    serves it) and a saved report has nowhere beside it, comes from Locust's package."""
    url = route.request.url
    if not url.startswith("file:"):
        route.abort()
    elif "/assets/favicon-" in url:
        route.fulfill(path=LOCUST_ASSETS / url.rsplit("/", 1)[1])
    else:
        route.continue_()


@pytest.mark.processes
def test_html_report_of_an_own_locustfile_renders_locust_tables_and_the_llm_summary(tmp_path):
    (tmp_path / "mylocust.py").write_text(LOCUSTFILE, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "locust", "-f", "mylocust.py", "--headless", "-u", "6", "-r", "6", "-t", "4s",
         "--html", "r.html", "--run-dir", "run", "--sim-args", FAST_SIM, "--loglevel", "WARNING"],
        cwd=tmp_path, capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]
    report = tmp_path / "r.html"
    with chromium_page() as page:
        errors = open_report(page, report)
        assert errors == []  # a script that does not parse fails here, not after a wait
        page.get_by_text("Request Statistics", exact=True).wait_for(state="visible")
        page.get_by_text("Response Time Statistics", exact=True).wait_for(state="visible")
        page.get_by_text("Charts", exact=True).wait_for(state="visible")
        assert page.locator("td", has_text="short").first.is_visible()  # a row of Locust's table
        ours = page.locator("#uni-bench")
        ours.wait_for(state="visible")
        assert "LLM figures (uni-bench)" in ours.inner_text()
        summary = ours.locator("pre").inner_text()
        assert "uni-bench summary: locust run" in summary and "short" in summary
        assert HOSTILE in summary  # the name's text, shown as text
        assert page.locator("#injected").count() == 0
        assert errors == []
        link = page.locator("#uni-bench-report")  # the run's report.html, relative: the two files move together
        href = link.get_attribute("href")
        assert not href.startswith(("/", "file:", "http"))
        assert (report.parent / href).resolve() == (tmp_path / "run" / "report.html").resolve()
        with page.expect_navigation():
            link.click()
        page.wait_for_selector("body[data-rendered=yes]")  # the run's page, drawn by its own script
        assert page.title() == "uni-bench report: run" and errors == []


@pytest.mark.processes
def test_summary_goes_in_the_body_that_ends_the_page_not_a_body_tag_inside_a_script(tmp_path):
    """Locust 2.47's report inlines a script whose strings hold `<body ...></body>`; the summary
    must land in the document's body, escaped, whatever it says."""
    report = tmp_path / "r.html"
    report.write_text(
        "<!doctype html><html><head><script>var page = '<body style=\"margin:0;\"><img /></body>';"
        "</script><style>p::after { content: '</body>'; }</style></head>\n<body><div id=\"root\">"
        "Locust tables</div><script>document.getElementById('root').dataset.ok = page.length;</script>\n"
        "</body>\n</html>\n", encoding="utf-8")
    summary = "uni-bench summary\n  cell  </pre></body></html><script>throw 1</script> & ' \" \\\n"
    add_to_html_report(str(report), summary, tmp_path / "run </pre>")
    with chromium_page() as page:
        errors = open_report(page, report)
        assert errors == []
        assert page.locator("#root").get_attribute("data-ok") == "38"  # the script still ran, unchanged
        assert page.locator("#uni-bench pre").inner_text().rstrip("\n") == summary.rstrip("\n")
        assert "run </pre>" in page.locator("#uni-bench p").inner_text()
