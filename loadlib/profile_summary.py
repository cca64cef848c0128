"""The end-of-run summary, as the session and the web UI call it today.

The summary is `analysis.render_summary`: one implementation, which `python -m analysis report`
prints too. This adaptor keeps the callers' old signature; once they call
`render_summary(records, manifest, run_dir)` (the run directory adds the server's view), it goes.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from analysis import render_summary
from loadlib.profiles import Profile


def render_run_summary(records: Iterable[dict[str, Any]], manifest: Mapping[str, Any],
                       _profile: Profile | None = None) -> str:
    """The summary of the records under the run's final manifest (which holds the profile)."""
    return render_summary(records, manifest)
