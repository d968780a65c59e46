"""The size presets: JSON files of config fields per model family, read without importing a model.

Packaged presets live in `model_configs/` (`paper`, `tiny`); a preset file of one's own has the same
form, `{"description": ..., "families": {family: {config fields}}}`. `parameter_counts.json` holds
each packaged preset's parameter counts with the SHA-256 of the file they were counted from, so
`medreco info` answers without building the models (tests/test_cli.py checks them against
`medreco.factory.parameter_summary`; `medreco.factory.write_parameter_counts()` rewrites the file)."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

from .errors import PresetError

FAMILIES = ("vision", "retrieval", "reranker", "vlm")
MODEL_CONFIGS = Path(__file__).parent / "model_configs"
PARAMETER_COUNTS = MODEL_CONFIGS / "parameter_counts" / "parameter_counts.json"


def read_preset(path: Path) -> dict[str, Any]:
    """A preset file's description, families and path; `PresetError` naming the file if it is not one."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PresetError(f"{path}: not a readable preset file ({error})") from None
    families = content.get("families") if isinstance(content, dict) else None
    if not isinstance(families, dict) or not all(isinstance(v, dict) for v in families.values()):
        raise PresetError(f'{path}: a preset is {{"description": "...", "families": {{family: {{config fields}}}}}}')
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise PresetError(f"{path}: unknown model families {unknown}; choose from {FAMILIES}")
    return {"description": str(content.get("description", "")), "families": families, "file": path}


PRESET_FILES: dict[str, dict[str, Any]] = {
    path.stem: read_preset(path) for path in sorted(MODEL_CONFIGS.glob("*.json"))
}
PRESETS: dict[str, dict[str, dict[str, Any]]] = {name: preset["families"] for name, preset in PRESET_FILES.items()}


def preset_fields(preset: str | Path, family: str) -> dict[str, Any]:
    """A copy of the config fields of `family` in a packaged preset (by name) or a preset file (by path)."""
    if str(preset) in PRESETS:
        families = PRESETS[str(preset)]
    elif str(preset).endswith(".json"):
        families = read_preset(Path(preset).expanduser())["families"]
    else:
        raise ValueError(f"unknown preset {str(preset)!r}; choose from {sorted(PRESETS)} or give a preset .json file")
    return copy.deepcopy(families.get(family, {}))


def preset_digest(name: str) -> str:
    return hashlib.sha256(PRESET_FILES[name]["file"].read_bytes()).hexdigest()


def cached_parameter_counts(preset: str | Path) -> dict[str, dict[str, int]] | None:
    """family -> counts of a packaged preset, as counted from its current file; None otherwise."""
    name = str(preset)
    if name not in PRESET_FILES or not PARAMETER_COUNTS.is_file():
        return None
    entry = json.loads(PARAMETER_COUNTS.read_text(encoding="utf-8")).get(name)
    if not entry or entry.get("sha256") != preset_digest(name):
        return None
    return entry["families"]


__all__ = [
    "FAMILIES",
    "MODEL_CONFIGS",
    "PARAMETER_COUNTS",
    "PRESETS",
    "PRESET_FILES",
    "cached_parameter_counts",
    "preset_digest",
    "preset_fields",
    "read_preset",
]
