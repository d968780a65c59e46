"""Write a processor's code next to its saved files, flat, for `trust_remote_code=True` loading.

transformers loads remote code from one flat folder and follows only `from .module import ...`
imports. The processors live in a package and import its shared modules (`..errors`, `..atomic`,
`..modeling.configuration_vision`) and packages (`.readers`), so saving copies the processor's module
and everything it imports from medreco, each import rewritten to the flat form (`from ..errors import
X` -> `from .errors import X`). A package imported as such is laid out as one module per file, named
after the package: `readers/__init__.py` as `readers.py`, `readers/dicom.py` as `readers_dicom.py`
(`from .dicom import X` inside it -> `from .readers_dicom import X`). A processor loaded from such a
folder (its modules already flat) saves the same files."""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..atomic import write_text_atomically
from ..errors import MedReCoError


class RemoteCodeError(MedReCoError, RuntimeError):
    """The processor's code cannot be laid out flat (`from . import module`, an import of something
    that is no module or package, two modules with one flat name, or a module of that name already in
    the folder with other code)."""


def _shown(path: Path) -> str:
    """A module file as error messages name it (a package's `__init__.py` with its folder)."""
    return f"{path.parent.name}/{path.name}" if path.name == "__init__.py" else path.name


def _imported_file(node: ast.ImportFrom, importer: Path) -> Path:
    """The file a relative import loads: the module `x.py`, or the package's `x/__init__.py`."""
    base = importer.parent
    for _ in range(node.level - 1):
        base = base.parent
    if not node.module:
        raise RemoteCodeError(f"{_shown(importer)}: `from {'.' * node.level} import ...` cannot be laid out flat")
    target = base.joinpath(*node.module.split("."))
    if (target / "__init__.py").is_file():  # as Python does, a package before a module of its name
        return target / "__init__.py"
    if target.with_suffix(".py").is_file():
        return target.with_suffix(".py")
    raise RemoteCodeError(f"{_shown(importer)}: {'.' * node.level}{node.module} is neither a module file nor a package")


def _flat_stem(path: Path, packages: set[Path]) -> str:
    """The module name of `path` in the flat folder: its own, or, inside a package laid out flat, the
    package's flat name and its own (`readers/dicom.py` -> `readers_dicom`, `readers/__init__.py` ->
    `readers`)."""
    if path.parent not in packages:
        return path.stem
    package = _flat_stem(path.parent, packages)
    return package if path.name == "__init__.py" else f"{package}_{path.stem}"


def _relative_imports(path: Path, tree: ast.Module) -> list[tuple[ast.ImportFrom, Path]]:
    """Each relative import of a module with the file it loads; an absolute import of medreco is refused."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if any(name.split(".")[0] == "medreco" for name in names):
                raise RemoteCodeError(f"{_shown(path)} imports medreco by name; use a relative import")
        elif isinstance(node, ast.ImportFrom):
            found.append((node, _imported_file(node, path).resolve()))
    return found


def flat_sources(entry: str | Path) -> dict[str, str]:
    """The module `entry` and every module it imports relatively (recursively), as `{file name: source}`
    with each relative import rewritten to the flat form; packages are laid out as their modules."""
    texts: dict[Path, str] = {}
    imports: dict[Path, list[tuple[ast.ImportFrom, Path]]] = {}
    pending = [Path(entry).resolve()]
    while pending:  # first every module reached, to know which packages are laid out flat
        path = pending.pop()
        if path in texts:
            continue
        texts[path] = path.read_text(encoding="utf-8")
        imports[path] = _relative_imports(path, ast.parse(texts[path]))
        pending.extend(target for _, target in imports[path])
    packages = {path.parent for path in texts if path.name == "__init__.py"}
    origins: dict[str, Path] = {}
    sources: dict[str, str] = {}
    for path, text in texts.items():
        name = f"{_flat_stem(path, packages)}.py"
        if name in origins:
            raise RemoteCodeError(f"two modules named {name}: {origins[name]} and {path}")
        origins[name] = path
        lines = text.splitlines(keepends=True)
        for node, target in imports[path]:
            written, flat = f"{'.' * node.level}{node.module}", f".{_flat_stem(target, packages)}"
            if written != flat:
                first, last = node.lineno - 1, node.end_lineno - 1
                lines[first] = "".join(lines[first : last + 1]).replace(written, flat, 1)
                lines[first + 1 : last + 1] = [""] * (last - first)  # keeps later line numbers valid
        sources[name] = "".join(lines)
    return sources


@dataclass(frozen=True)
class AutoEntry:
    """One `auto_map` entry: `auto_class` resolves to `cls`, written in `config_file` (in its
    `section`, e.g. the image processor's settings inside `processor_config.json`)."""

    auto_class: str
    cls: type
    config_file: str
    section: str | None = None


def save_remote_code(directory: str | Path, entries: list[AutoEntry]) -> list[Path]:
    """Write each entry's module (and what it imports) flat into `directory` and its `auto_map`
    entry into its config file; returns the code files written."""
    directory = Path(directory)
    written: dict[str, Path] = {}
    for entry in entries:
        module_file = Path(sys.modules[entry.cls.__module__].__file__)
        for name, source in flat_sources(module_file).items():
            if name in written:
                continue
            existing = directory / name
            if existing.is_file() and existing.read_text(encoding="utf-8") != source:
                # e.g. a processor of another medreco version saved beside a model's code
                raise RemoteCodeError(f"{existing}: already holds other code of that name; save into a new folder")
            written[name] = write_text_atomically(existing, source)
        config_path = directory / entry.config_file
        config = json.loads(config_path.read_text(encoding="utf-8"))
        target = config if entry.section is None else config[entry.section]
        target.setdefault("auto_map", {})[entry.auto_class] = f"{module_file.stem}.{entry.cls.__name__}"
        write_text_atomically(config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")
    return list(written.values())


HUB_ARGUMENTS = ("commit_message", "commit_description", "private", "token", "revision", "create_pr", "tags")


def save_with_code(
    obj: object,
    save: Callable[..., Any],
    save_directory: str | Path,
    push_to_hub: bool,
    entries: list[AutoEntry],
    **kwargs: Any,
) -> Any:
    """`save(save_directory, **kwargs)` (the transformers `save_pretrained`), then the code; with
    `push_to_hub`, the upload comes last (through `obj.push_to_hub`, which saves aside with the code)."""
    repo_id = kwargs.pop("repo_id", None) or Path(save_directory).name
    hub = {name: kwargs.pop(name) for name in HUB_ARGUMENTS if name in kwargs}
    saved = save(save_directory, **kwargs)
    save_remote_code(save_directory, entries)
    if push_to_hub:
        obj.push_to_hub(repo_id, **hub)
    return saved


class ProcessorCodeMixin:
    """For a `ProcessorMixin` with an image processor: `save_pretrained` also writes the code of the
    processor and of its image processor, flat, with their `auto_map` entries; `from_pretrained` of a
    model folder saved without a processor builds the one its config implies (`from_model_config`)."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, *args: Any, **kwargs: Any) -> Any:
        from .from_config import needs_processor_from_config, read_model_config

        if not needs_processor_from_config(pretrained_model_name_or_path):
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        config = read_model_config(pretrained_model_name_or_path)
        return cls.from_model_config(config, pretrained_model_name_or_path, **kwargs)

    def save_pretrained(self, save_directory: str | Path, push_to_hub: bool = False, **kwargs: Any) -> Any:
        """The processor's files, plus its code for `trust_remote_code=True` loading."""
        entries = [
            AutoEntry("AutoProcessor", type(self), "processor_config.json"),
            AutoEntry("AutoImageProcessor", type(self.image_processor), "processor_config.json", "image_processor"),
        ]
        return save_with_code(self, super().save_pretrained, save_directory, push_to_hub, entries, **kwargs)


__all__ = ["AutoEntry", "ProcessorCodeMixin", "RemoteCodeError", "flat_sources", "save_remote_code", "save_with_code"]
