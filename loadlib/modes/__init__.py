"""Load modes: how requests are scheduled.

`MODES` (`registry.py`) is the one registry: mode name -> `LoadMode`, the one object that owns
both halves of the mode (its `[load]` table's schema, its coordinator's `Driver`, and what each
user runs in its process, `ModeState`). `OWN_USERS` is the mode of a locustfile with users of its
own (no profile asks for it).

The names load on first use: the post-processor reads a search's judgement (`search.py`), not
the modes' schemas (pydantic) and drivers (gevent).
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES_BY_MODULE = {
    "base": ("Assignment", "Coordination", "Driver", "LoadMode", "ModeState", "Phase"),
    "own_users": ("OWN_USERS",),
    "registry": ("MODES", "mode_named", "mode_of"),
}
_MODULE_OF = {name: module for module, names in _NAMES_BY_MODULE.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
