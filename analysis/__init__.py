"""After the run: the protocol's tables, reports, comparisons and plots from raw records.

`render_summary` is the end-of-run summary that the live run prints, and `python -m analysis
report` prints it too, after the manifest, so the two can never disagree. `protocol_summary`
gives the protocol's figures as issue 8's JSON schema.
"""

from analysis.run_summary import render_summary
from analysis.summary import protocol_summary

__all__ = ["protocol_summary", "render_summary"]
