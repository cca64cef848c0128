"""After the run: the protocol's tables, reports, comparisons and plots from raw records.

`protocol_summary` and `render_protocol_summary` are what both the live end-of-run summary
and `python -m analysis report` print, so the two can never disagree.
"""

from analysis.summary import protocol_summary, render_protocol_summary

__all__ = ["protocol_summary", "render_protocol_summary"]
