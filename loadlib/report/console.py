"""Plain text for the terminal: the layout the thread's users paste into forum posts."""

from __future__ import annotations

from loadlib.report import text
from loadlib.report.document import Document, flatten


def render(document: Document) -> str:
    lines = []
    if document.manifest:
        lines += ["Manifest"] + [f"  {key}: {value}" for key, value in flatten(document.manifest).items()] + [""]
    lines.append(document.heading)
    for section in document.shown():
        lines += ["", section.title, text.table(section.view, left=section.left)]
    return "\n".join(lines)
