"""Load modes: how requests are scheduled.

`MODES` (`registry.py`) is the one registry: mode name -> `LoadMode`, the one object that owns
both halves of the mode (its `[load]` table's schema, its coordinator's `Driver`, and what each
user runs in its process, `ModeState`). `OWN_USERS` is the mode of a locustfile with users of its
own (no profile asks for it).

The names load on first use: the post-processor reads a search's judgement (`search.py`), not
the modes' schemas (pydantic) and drivers (gevent).
"""

from __future__ import annotations

from loadlib.lazy import lazy_names

__all__, __getattr__ = lazy_names(__name__, {
    "base": ("Assignment", "Coordination", "Driver", "LoadMode", "ModeState", "Phase"),
    "own_users": ("OWN_USERS",),
    "registry": ("MODES", "mode_named", "mode_of"),
})
