"""report.html: one self-contained page of the views (one run, or several side by side), written
by the page writer (`loadlib.report.html_page`) where the reading says."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadlib.report.html_page import write_page

if TYPE_CHECKING:
    from loadlib.outputs import Reading


def render(reading: Reading) -> str:
    """Writes the page to `reading.out`; its path and size."""
    path = write_page(reading.views, reading.out)
    return f"{path}  ({path.stat().st_size / 1e6:.2f} MB)"
