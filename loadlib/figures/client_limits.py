"""Whether the client limited the figures: the judgement of the self-watch's snapshots
(`loadlib.run.selfwatch`, one per process, kept in the manifest's `client_watch`).

A client near a whole core was short of CPU itself (it may have capped the load and delayed
timestamps); a client with CPU to spare on a busy machine lost its turn to other processes (its
timestamps may be late by about the event-loop lag, the load it offered was not limited by it).
"""

from __future__ import annotations

from typing import Any

CPU_LIMIT_SHARE = 0.9  # above this, the client may have been the bottleneck
LAG_LIMIT_S = 0.005  # a p99 loop lag above this may have delayed timestamps
# A p99 of fewer than 100 samples is their maximum: one stall (a collection, a cell's end) is an
# event, not a tail. The lag counts only when at least this many samples lagged beyond the limit.
LAG_SPIKES = 2
STEAL_LIMIT_SHARE = 0.05  # more of the CPU stolen than this: a busy host
SWITCHES_LIMIT_PER_S = 100.0  # more involuntary context switches a second: the process lost its turn


def client_limited(snapshots: list[dict[str, Any]]) -> list[str]:
    """Reasons to suspect the figures were limited or their timestamps delayed on the client's
    side, one snapshot per process, each worded for what it means for the figures."""
    reasons = []
    for snap in snapshots:
        who = "the master (it receives every record and spawns the users)" if snap.get("role") == "master" \
            else "a client process"
        lag_ms = snap.get("loop_lag_p99_s", 0.0) * 1000
        if snap.get("cpu_share_max", 0.0) > CPU_LIMIT_SHARE:
            reasons.append(f"client short of CPU: {who} used {snap['cpu_share_max']:.0%} of a core, so it may "
                           f"have capped the load and read streams late (event-loop lag p99 {lag_ms:.1f} ms)")
        elif lagged(snap):
            if machine_busy(snap):
                reasons.append(f"machine busy, not the client: {who} used only {snap.get('cpu_share_max', 0.0):.0%} "
                               f"of a core while {snap.get('run_queue_max', 0):.0f} processes wanted "
                               f"{snap.get('cores', 0)} cores (steal {snap.get('steal_share_max', 0.0):.0%}, "
                               f"{snap.get('involuntary_switches_per_s', 0.0):.0f} forced switches/s); timestamps may "
                               f"be late by up to the event-loop lag p99 {lag_ms:.1f} ms, the load offered was not "
                               "limited by the client")
            else:
                reasons.append(f"client event-loop lag p99 was {lag_ms:.1f} ms: timestamps may be late by up to that")
    return reasons


def lagged(snap: dict[str, Any]) -> bool:
    """Whether the event loop lagged beyond `LAG_LIMIT_S` in more than 1 % of the samples, and in
    at least `LAG_SPIKES` of them (snapshots from before the count was kept: by their p99 alone)."""
    if snap.get("loop_lag_p99_s", 0.0) <= LAG_LIMIT_S:
        return False
    over = snap.get("loop_lag_over_limit")
    return over is None or (over >= LAG_SPIKES and over > 0.01 * snap.get("samples", 0))


def machine_busy(snap: dict[str, Any]) -> bool:
    """Whether other processes took the CPU from this one (run queue above the cores, steal, or
    many involuntary context switches)."""
    return (snap.get("run_queue_max", 0) > snap.get("cores", 1 << 30)
            or snap.get("steal_share_max", 0.0) > STEAL_LIMIT_SHARE
            or snap.get("involuntary_switches_per_s", 0.0) > SWITCHES_LIMIT_PER_S)
