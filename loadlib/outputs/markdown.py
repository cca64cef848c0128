"""GitHub-flavoured Markdown tables, for posting (no tabulate: pipes joined by pandas): the heading and
the tables first, the manifest after them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from loadlib.report.document import Document, flatten

if TYPE_CHECKING:
    from loadlib.outputs import Reading


HELP = "Markdown tables for posting"  # the command line's words for it


def render(reading: Reading) -> str:
    return render_document(reading.document)


def render_document(document: Document) -> str:
    parts = [f"## {document.heading}"]
    for section in document.shown():
        parts += [f"**{section.title}**", _table(section.view, left=section.left)]
    if document.manifest:  # after the tables: a post leads with its answer
        manifest = pd.DataFrame(list(flatten(document.manifest).items()), columns=["manifest", "value"])
        parts += ["**Manifest** (what was run, as the run recorded it)", _table(manifest.astype(str), left=("manifest", "value"))]
    return "\n\n".join(parts)


def _table(view: pd.DataFrame, left: tuple[str, ...]) -> str:
    if view.empty:
        return "(none)"
    escaped = view.apply(lambda col: col.str.replace("|", "\\|", regex=False))
    header = "| " + " | ".join(view.columns) + " |"
    rule = "|" + "|".join(":---" if col in left else "---:" for col in view.columns) + "|"
    rows = escaped.apply(lambda row: "| " + " | ".join(row) + " |", axis=1)
    return "\n".join([header, rule, *rows])
