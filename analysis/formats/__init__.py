"""Output formats: one module each, each with `render(document: Document) -> str`."""

from analysis.formats import console, csv, json, markdown

RENDERERS = {"text": console.render, "json": json.render, "csv": csv.render, "md": markdown.render}
