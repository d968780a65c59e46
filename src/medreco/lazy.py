"""Packages whose names load on first use (PEP 562), so that importing one module of a package does
not import all of its siblings (and torch with them): the command line starts in a second.

A package lists what it exports once, as imports under `if TYPE_CHECKING:` (type checkers, editors
and the layering test read them as usual), and ends with
`__getattr__, __dir__ = lazy_exports(__name__, __file__)`; each name is imported from its module
the first time it is asked for, as transformers' own `_LazyModule` does."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any


def exported_names(init_file: str | Path) -> dict[str, str]:
    """name -> relative module, from the `from .module import name` statements under `if TYPE_CHECKING:`."""
    tree = ast.parse(Path(init_file).read_text(encoding="utf-8"))
    table: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.level:
                    module = "." * statement.level + (statement.module or "")
                    table.update({alias.asname or alias.name: module for alias in statement.names})
    return table


def lazy_exports(
    package: str,
    init_file: str | Path,
    on_first_use: Callable[[], None] | None = None,
    light_modules: tuple[str, ...] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of a package whose exports load on first use. `on_first_use`
    runs once, before the first name from a module outside `light_modules` loads (e.g. registering
    the package's classes with the transformers Auto classes, which imports torch)."""
    table = exported_names(init_file)
    pending = [on_first_use] if on_first_use is not None else []

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        relative = table[name]
        if relative not in light_modules:
            while pending:
                pending.pop()()
        if relative.strip(".") == "":  # `from . import name`: the submodule itself
            value = import_module(relative + name, package)
        else:
            value = getattr(import_module(relative, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return __getattr__, __dir__


__all__ = ["exported_names", "lazy_exports"]
