"""Old module paths kept working for one release after a move, with a FutureWarning.

An old module file holds two lines: `from medreco.deprecation import moved_to` and
`moved_to(__name__, "medreco.new.path")`. The old name then is the new module itself (same
classes, same functions), so code written against either path sees the same objects. A module that
kept most of its contents serves the names that left it through `moved_names`."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from typing import Any


def warn_moved(old_name: str, new_name: str, stacklevel: int = 3) -> None:
    """Tell the importer of `old_name` where it went."""
    message = f"{old_name} moved to {new_name}; the old path goes in the next release"
    warnings.warn(message, FutureWarning, stacklevel=stacklevel)


def moved_to(old_name: str, new_name: str) -> None:
    """Make module `old_name` an alias of `new_name`, warning the importer that the path is deprecated."""
    warn_moved(old_name, new_name, stacklevel=4)
    sys.modules[old_name] = importlib.import_module(new_name)


def moved_names(module_name: str, moves: dict[str, str]) -> Callable[[str], Any]:
    """A module-level `__getattr__` that still serves names moved out of `module_name` (name -> new module)."""

    def __getattr__(name: str) -> Any:
        if name not in moves:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        warn_moved(f"{module_name}.{name}", f"{moves[name]}.{name}")
        return getattr(importlib.import_module(moves[name]), name)

    return __getattr__


__all__ = ["moved_names", "moved_to", "warn_moved"]
