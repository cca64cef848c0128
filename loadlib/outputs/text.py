"""Plain text for the terminal: the layout the thread's users paste into forum posts (the end of a
run prints and saves its summary so)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadlib.report.document import Document, flatten
from loadlib.report.text import table

if TYPE_CHECKING:
    from loadlib.outputs import Reading


HELP = "plain text, as the summary prints it"  # the command line's words for it


def render(reading: Reading) -> str:
    return render_document(reading.document)


def render_document(document: Document) -> str:
    lines = []
    if document.manifest:
        lines += ["Manifest"] + [f"  {key}: {value}" for key, value in flatten(document.manifest).items()] + [""]
    lines.append(document.heading)
    for section in document.shown():
        lines += ["", section.title, table(section.view, left=section.left)]
    return "\n".join(lines)
