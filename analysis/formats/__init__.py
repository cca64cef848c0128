"""Output formats: one module each, each with `render(document: Document) -> str` (the console's
lives with the end-of-run summary, in `loadlib.report.console`)."""

from analysis.formats import csv, json, markdown
from loadlib.report import console

RENDERERS = {"text": console.render, "json": json.render, "csv": csv.render, "md": markdown.render}
