"""The worker processes a distributed run lost, from the manifest (`lost_workers`, written by
`loadlib.run.workers`): which, when, the users each ran and the requests it had in flight."""

from __future__ import annotations

import time
from typing import Any, Mapping

import pandas as pd

from loadlib.report import text
from loadlib.report.document import Section

COLUMNS = ["worker", "pid", "at", "users", "requests_in_flight", "exit"]


def lost_workers_section(manifest: Mapping[str, Any]) -> Section:
    lost = pd.DataFrame([entry for entry in manifest.get("lost_workers") or () if isinstance(entry, Mapping)],
                        columns=COLUMNS)
    users, in_flight = int(lost["users"].sum()), int(lost["requests_in_flight"].sum())
    title = (f"WORKERS LOST: {len(lost)} worker process{'es' if len(lost) != 1 else ''} ended during the run, "
             f"with {users} users and {in_flight} requests in flight (a round's requests are failures 'worker lost'; "
             "a free-running worker's requests in flight left no record)")
    return Section("lost_workers", title, lost, pd.DataFrame({
        "worker": lost["worker"].astype(str),
        "pid": [text.MISSING if pd.isna(pid) else str(int(pid)) for pid in lost["pid"]],
        "at": [time.strftime("%H:%M:%S", time.localtime(at)) for at in lost["at"]],
        "users": text.column(lost["users"], 0),
        "in flight": text.column(lost["requests_in_flight"], 0),
        "how it ended": [exit_ or "unknown" for exit_ in lost["exit"]],
    }), keys=("worker",), left=("worker", "how it ended"), optional=True)
