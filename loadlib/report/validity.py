"""The validity block: every check of every measured cell (`loadlib.figures.validity`) as one
section, the summary's last.

Its data holds every check, passed or not (`tables.validity` in `--json`, one row per cell and
check, in the CSV); people read the checks that failed or could not be made, each in words, one
line for a check that went the same way in several cells, under a title that counts them all.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from loadlib.figures.free_running import SteadyCell
from loadlib.figures.validity import CAVEATS, CHECKS, Check, server_absence, validity_checks
from loadlib.report.document import Section
from loadlib.truth import server_figures

COLUMNS = ["cell", "name", "ok", "detail"]
WHAT = ("per cell: client headroom; with workers, their clocks against the master's; failed requests; completion "
        "tokens, requests and requests in flight, client against server; accept length against tok/chunk; "
        "speculative decoding, the requests' account against the server's counters; in rounds of N streams whether "
        "they ran together "
        "(overlap); Little's law in free-running cells; cache state where a cell meant one")


def run_checks(scrapes: list[dict[str, Any]], records: pd.DataFrame, manifest: Mapping[str, Any],
               steady_cells: Iterable[SteadyCell] = (), unmeasured: pd.DataFrame | None = None,
               concurrent: pd.DataFrame | None = None,
               spec: Sequence[server_figures.SpecCounters] | None = None) -> list[Check]:
    """Every check of the run whose parsed scrapes, records, manifest, unmeasured requests
    (`RunView.unmeasured`), concurrency table and speculative-decoding counters (made from the
    scrapes when not given) are given."""
    launch = (manifest.get("server") or {}).get("launch")
    return validity_checks(records, manifest, server_figures.server_cells(scrapes, records, launch),
                           server_absence(manifest, scrapes), steady_cells, unmeasured, concurrent,
                           server_figures.spec_counters(scrapes) if spec is None else spec)


def checks_section(checks: Sequence[Check]) -> Section:
    data = pd.DataFrame([asdict(c) for c in checks], columns=COLUMNS).astype({"ok": object})
    failed = sum(c.ok is False for c in checks)
    caveats = sum(c.ok is False and c.name in CAVEATS for c in checks)
    unmade = sum(c.ok is None for c in checks)
    if not checks:
        verdict = "Validity: no measured cell to judge"
    elif failed:
        kinds = ("" if not caveats else f" ({caveats} of them the protocol's aggregate misleading: a caveat of the "
                 "figure, not a fault)" if caveats < failed else
                 ", all of them the protocol's aggregate misleading: a caveat of the figure, not a fault of the "
                 "server or the client")
        verdict = f"VALIDITY: {failed} of {len(checks)} checks failed{kinds}" + (
            f", {unmade} could not be made" if unmade else "")
    elif unmade:
        verdict = f"Validity: no check failed; {unmade} of {len(checks)} could not be made"
    else:
        verdict = f"Validity: all {len(checks)} checks passed in every cell; none failed or could not be made"
    return Section("validity", f"{verdict} ({WHAT})", data,
                   pd.DataFrame({"failed or not made": findings(checks)}), keys=("cell", "name"),
                   left=("failed or not made",))


def findings(checks: Sequence[Check]) -> list[str]:
    """The checks that failed, then those that could not be made, in words: "c4-different: client
    and server disagree: ...", "every cell: requests (client against server) not checked: ...";
    a check that went the same way in every cell (every time each ran) is one line, and so is one
    not made in several."""
    cells = list(dict.fromkeys(c.cell for c in checks))
    made = Counter(c.name for c in checks)  # a cell that ran several times has a check per time
    grouped: dict[tuple[str, bool | None, str], list[str]] = {}
    for check in checks:
        if check.ok is not True:
            grouped.setdefault((check.name, check.ok, check.detail), []).append(check.cell)
    lines = []
    for wanted in (False, None):
        for (name, ok, detail), where in grouped.items():
            if ok is not wanted:
                continue
            if len(cells) > 1 and set(where) == set(cells) and len(where) == made[name]:
                labels = ["every cell"]
            else:  # a failure flags each cell; a check not made names its cells at once
                labels = list(dict.fromkeys(where)) if ok is False else [", ".join(dict.fromkeys(where))]
            lines += [f"{label}: {detail}" if ok is False else f"{label}: {CHECKS[name]} not checked: {detail}"
                      for label in labels]
    return lines
