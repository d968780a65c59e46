"""The package's layering, read from its import graph (every import statement, also those inside
functions): lower layers never import higher ones, so a reader can understand each layer alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import medreco

PACKAGE = Path(medreco.__file__).parent

# From the bottom up. A module may import its own layer and the layers below it.
LAYERS = [
    {"errors", "atomic", "lazy", "presets"},
    {"modeling"},
    {"processing", "factory", "hub"},
    {"data"},
    {"inference"},
    {"training", "evaluation"},
    {"demo"},
    {"cli", "__main__"},
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> set[str]:
    """medreco modules (without the `medreco.` prefix) that `path` imports, anywhere in the file."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("medreco.")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
                candidates = [target, *(f"{target}.{alias.name}" for alias in node.names)] if target else []
            elif (node.module or "").startswith("medreco"):
                module = node.module.removeprefix("medreco").lstrip(".")
                candidates = [module, *(f"{module}.{alias.name}".lstrip(".") for alias in node.names)]
            else:
                continue
            found |= {c for c in candidates if c and module_exists(c)}
    return {m.removeprefix("medreco.") for m in found}


def module_exists(name: str) -> bool:
    path = PACKAGE.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def room(module: str) -> str:
    return module.split(".")[0]


def layer(module: str) -> int:
    return next(i for i, rooms in enumerate(LAYERS) if room(module) in rooms)


GRAPH = {module_name(path): imported_modules(path) for path in sorted(PACKAGE.rglob("*.py")) if module_name(path)}


def test_the_graph_is_read():
    assert "modeling.configuration_vision" in GRAPH["modeling.modeling_vision"]
    assert "data.reports.decomposition" in GRAPH["inference.comparison"]
    assert "inference" in GRAPH["cli.inference"]  # a lazy import inside a function counts
    assert "training.loop" in GRAPH["training.stage1"]


def test_every_module_belongs_to_a_layer():
    assert [m for m in GRAPH if not any(room(m) in rooms for rooms in LAYERS)] == []


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_module_imports_a_higher_layer(module):
    upward = sorted(m for m in GRAPH[module] if layer(m) > layer(module))
    assert upward == [], f"{module} imports {upward}"


def test_modeling_imports_nothing_outside_itself():
    """`modeling/` is exported as is next to a checkpoint for `trust_remote_code` loading."""
    for module, imports in GRAPH.items():
        if room(module) == "modeling":
            assert {room(m) for m in imports} <= {"modeling"}, module
            source = PACKAGE.joinpath(*module.split(".")).with_suffix(".py")
            if source.exists():
                assert "medreco" not in {
                    (node.module or "").split(".")[0]
                    for node in ast.walk(ast.parse(source.read_text()))
                    if isinstance(node, ast.ImportFrom) and not node.level
                }, f"{module}: absolute medreco import"


def test_inference_never_imports_training_evaluation_or_demo():
    for module, imports in GRAPH.items():
        if room(module) == "inference":
            assert not {room(m) for m in imports} & {"training", "evaluation", "demo", "cli"}, module


def test_training_and_evaluation_never_import_each_other():
    for module, imports in GRAPH.items():
        other = {"training": "evaluation", "evaluation": "training"}.get(room(module))
        if other:
            assert other not in {room(m) for m in imports}, module


def test_processing_imports_nothing_above_it():
    allowed = {"processing", "modeling", "errors", "atomic", "lazy"}
    for module, imports in GRAPH.items():
        if room(module) == "processing":
            assert {room(m) for m in imports} <= allowed, module


# Inside `data/`, from the bottom up: reading reports, then the synthetic cohort (which writes reports
# in the vocabulary), then mining (which reads both); public datasets' readers stand beside mining.
DATA_LAYERS = [{"reports"}, {"phantom"}, {"mining", "public_datasets"}]


def data_layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "data" or len(parts) < 2:
        return None
    return next((i for i, rooms in enumerate(DATA_LAYERS) if parts[1] in rooms), None)


def test_data_rooms_import_only_their_own_level_and_below():
    """No folder-scale loop in `data/`: reports never import the cohort or mining, the cohort never mining."""
    for module, imports in GRAPH.items():
        level = data_layer(module)
        if level is not None:
            upward = sorted(m for m in imports if (data_layer(m) or 0) > level)
            assert upward == [], f"{module} imports {upward}"


def test_the_data_layers_name_every_data_room():
    rooms = {m.split(".")[1] for m in GRAPH if m.startswith("data.") and m.count(".") >= 1}
    assert rooms <= set().union(*DATA_LAYERS), rooms - set().union(*DATA_LAYERS)


def test_readers_stand_below_the_processors():
    """`processing/readers/` reads files into `MedicalImage`s: it never imports a processor, the cache
    or the privacy code, so a reader of one format can be understood (and exported) alone."""
    for module, imports in GRAPH.items():
        if module.startswith("processing.readers"):
            inside = {m for m in imports if m.startswith("processing.")}
            allowed = {m for m in inside if m.startswith("processing.readers") or m == "processing.geometry"}
            assert inside == allowed, f"{module} imports {sorted(inside - allowed)}"


def test_each_command_group_stands_alone():
    """`cli/`: `main` (cli/__init__.py) gathers the groups; a group imports no other group."""
    groups = {m for m in GRAPH if m.startswith("cli.") and m != "cli.command"}
    for module in groups:
        others = {m for m in GRAPH[module] if m in groups and m != module}
        assert others == set(), f"{module} imports {sorted(others)}"
    assert groups <= GRAPH["cli"] | {"cli.__main__"}
