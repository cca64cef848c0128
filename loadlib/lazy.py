"""Package names that load on first use (PEP 562), for `loadlib.modes` and `loadlib.scenarios`.

Importing such a package costs nothing until one of its names is asked for: the post-processor
reads a few names of theirs without paying for the modes' and kinds' schemas (pydantic), drivers
(gevent) and shipped data (`tests/test_imports.py`). Imports only the standard library.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping


def lazy_names(package: str, names_by_module: Mapping[str, tuple[str, ...]]) -> tuple[list[str], Callable[[str], Any]]:
    """The package's `__all__` and its module `__getattr__`, which imports the submodule holding
    a name (`names_by_module`: submodule -> the names it gives) when the name is first asked for.

        __all__, __getattr__ = lazy_names(__name__, {"base": ("Driver",), ...})
    """
    module_of = {name: module for module, names in names_by_module.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return sorted(module_of), __getattr__
