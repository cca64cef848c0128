"""Every output of runs read once (`loadlib.run_view.RunView`): one module per format, each with
`render(reading) -> str` (what the command prints), and `OUTPUTS`, the one registry of them.

The exports (`vllm`, `llmd`: other tools' formats) write one file per cell where the reading says
(`cell_files`), and print what they wrote.

A `Reading` is what a command shows: the views it read, and for the formats that print tables the
document it makes of them (the end-of-run summary, a run's report, a comparison, a panorama:
`loadlib.report.document.Document`); report.html and the PNG charts draw the views themselves
and write where `out` says. A new format is one module here with its `render` and one line in
`OUTPUTS`; the commands of `python -m analysis` offer the table formats as options by these names.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

if TYPE_CHECKING:
    from loadlib.figures.cell_requests import CellRequests
    from loadlib.report.document import Document
    from loadlib.run_view import RunView

# format name -> its module here, imported when asked for (the PNG charts load matplotlib)
OUTPUTS = {"text": "text", "json": "json", "csv": "csv", "md": "markdown", "html": "html", "png": "png",
           "vllm": "vllm", "llmd": "llmd"}
TABLE_FORMATS = ("text", "json", "csv", "md")  # those that render the document
EXPORT_FORMATS = ("vllm", "llmd")  # other tools' formats, one file per cell


@dataclass
class Reading:
    """What a command shows (see the module's doc)."""

    views: Sequence[RunView]
    make_document: Callable[[], Document] | None = None
    out: Path | None = None  # the file (html) or folder (png) written

    @cached_property
    def document(self) -> Document:
        if self.make_document is None:
            raise ValueError("this reading has no document: a table format needs one")
        return self.make_document()


def output(name: str) -> ModuleType:
    """The module of the format registered as `name`."""
    return importlib.import_module(f"{__name__}.{OUTPUTS[name]}")


def cell_files(view: RunView, out: Path) -> Iterator[tuple[Path, int, CellRequests, RunView]]:
    """Each cell of each server of the view in reading order (`cell_requests.cells`), with its place
    among its server's cells, the file it goes to (`out/CELL.json`; a run of several servers:
    `out/SERVER/CELL.json`, folders made) and its server's view."""
    from loadlib.figures.cell_requests import cells

    for server in view.by_target(prefixed=False):
        folder = out / server.label if server is not view else out
        folder.mkdir(parents=True, exist_ok=True)
        for place, cell in enumerate(cells(server.records)):
            name = "".join(c if c.isalnum() or c in "-_." else "_" for c in cell.name)
            yield folder / f"{name}.json", place, cell, server
