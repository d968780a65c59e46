"""Save a model so that plain transformers loads it with `trust_remote_code=True`.

The files of `medreco/modeling` are self-contained (relative imports only); they are copied flat
next to the weights and `auto_map` in `config.json` points the Auto classes at them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from transformers import PreTrainedModel

from .. import modeling
from ..atomic import write_text_atomically
from ..modeling import AUTO_REGISTRATIONS, DEPRECATED_MODULES


def _qualified(cls: type) -> str:
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"


def export_for_remote_code(model: PreTrainedModel, directory: str | Path) -> Path:
    """`save_pretrained` (safetensors) plus the modeling code and an `auto_map` for remote-code loading."""
    directory = Path(directory)
    model.save_pretrained(directory)
    for source in Path(modeling.__file__).parent.glob("*.py"):
        if source.name != "__init__.py" and source.stem not in DEPRECATED_MODULES:
            shutil.copyfile(source, directory / source.name)
    config_class = type(model.config)
    auto_map = {"AutoConfig": _qualified(config_class)}
    for _, registered_config, models in AUTO_REGISTRATIONS:
        if registered_config is config_class:
            for auto_class, model_class in models:
                auto_map[auto_class.__name__] = _qualified(model_class)
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    config["auto_map"] = auto_map
    write_text_atomically(config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")
    return directory
