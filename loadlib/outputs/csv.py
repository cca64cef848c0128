"""One tidy CSV for every table: `section,row,column,value`.

A single valid CSV that spreadsheets and pandas read as is; one table back is
`df[df.section == "single_stream"].pivot(index="row", columns="column", values="value")`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from loadlib.report.document import Document, flatten

if TYPE_CHECKING:
    from loadlib.outputs import Reading


HELP = "one tidy CSV: section,row,column,value"  # the command line's words for it


def render(reading: Reading) -> str:
    return render_document(reading.document)


def render_document(document: Document) -> str:
    parts = []
    if document.manifest:
        manifest = pd.Series(flatten(document.manifest), dtype=object)
        parts.append(pd.DataFrame({"section": "manifest", "row": manifest.index,
                                   "column": "value", "value": manifest.astype(str).to_numpy()}))
    for section in document.sections:
        data = section.data
        if data.empty:
            continue
        row = (data[list(section.keys)].astype(str).fillna("").agg("/".join, axis=1) if section.keys  # a missing key: ""
               else data.index.astype(str))
        long = data.drop(columns=list(section.keys)).astype(object).set_axis(row.to_numpy()).stack()
        parts.append(pd.DataFrame({"section": section.key, "row": long.index.get_level_values(0),
                                   "column": long.index.get_level_values(1), "value": long.to_numpy()}))
    if not parts:
        return "section,row,column,value\n"
    return pd.concat(parts, ignore_index=True)[["section", "row", "column", "value"]].to_csv(index=False)
