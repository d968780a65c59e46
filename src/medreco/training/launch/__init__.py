"""Accelerate launch configurations shipped with the package, and the DeepSpeed JSONs they name.

The files live once, in the repository's `accelerate_configs/` (where users of TRL and the alignment
handbook look: `accelerate launch --config_file accelerate_configs/deepspeed_zero3.yaml ...` from a
clone's root); the package reaches them through `configs/`, a link to that folder, and installs copies.
A YAML names its DeepSpeed JSON relative to the repository root; `launch_config` returns the text
with the installed JSON's absolute path, and `write_launch_config` writes the YAML and a copy of
its JSON into a folder, so `accelerate launch --config_file ...` works from any working folder:

    medreco accelerate-config deepspeed_zero3 --num-processes 8 --out configs/
    accelerate launch --config_file configs/deepspeed_zero3.yaml -m medreco train stage1 --config paper

`deepspeed_config_path("zero3")` is the packaged JSON for a recipe's `run.deepspeed_config`."""

from __future__ import annotations

import json
import logging
import re
from importlib import resources
from pathlib import Path

import yaml

from ...atomic import write_text_atomically
from ...errors import LaunchConfigError

logger = logging.getLogger(__name__)

# name -> one line on what the setting is (`medreco accelerate-config --list`)
DESCRIPTIONS: dict[str, str] = {
    "cpu": "one process on the CPU (smoke tests)",
    "multi_gpu": "one machine, DDP over its GPUs",
    "deepspeed_zero2": "DeepSpeed ZeRO-2",
    "deepspeed_zero3": "DeepSpeed ZeRO-3",
    "deepspeed_zero3_offload": "DeepSpeed ZeRO-3, optimiser and parameters offloaded to CPU RAM",
    "fsdp": "PyTorch FSDP2, one shard unit per block the model names in _no_split_modules",
    "multi_node_deepspeed_zero3": "two nodes x 8 GPUs, DeepSpeed ZeRO-3",
}
LAUNCH_CONFIGS: tuple[str, ...] = tuple(DESCRIPTIONS)
DEEPSPEED_CONFIGS: tuple[str, ...] = ("zero2", "zero3", "zero3_offload")

_DEEPSPEED_FILE = re.compile(r"^(?P<indent>[ \t]+deepspeed_config_file:)[ \t]*(?P<value>\S.*)$", re.M)


def _top_level(key: str) -> re.Pattern[str]:
    return re.compile(rf"^{key}:[ \t]*(?P<value>\S.*)$", re.M)


def _folder() -> Path:
    return Path(str(resources.files(__name__))) / "configs"


def launch_config_names() -> tuple[str, ...]:
    """The packaged launch configs' names (`LAUNCH_CONFIGS`)."""
    return LAUNCH_CONFIGS


def launch_config_file(name: str) -> Path:
    """The installed YAML of a packaged launch config (it names its JSON by file name only: use
    `launch_config` or `write_launch_config` for a file to launch with)."""
    stem = name.removesuffix(".yaml")
    if stem not in LAUNCH_CONFIGS:
        raise LaunchConfigError(f"{name!r}: no such launch config (choices: {', '.join(LAUNCH_CONFIGS)})")
    return _folder() / f"{stem}.yaml"


def deepspeed_config_path(name_or_path: str | Path) -> Path:
    """A packaged DeepSpeed JSON by short name (`zero2`, `zero3`, `zero3_offload`) or stem
    (`deepspeed_zero3`), else an existing JSON file's path; a name is looked up first."""
    value = str(name_or_path)
    stem = value.removeprefix("deepspeed_")
    if stem in DEEPSPEED_CONFIGS:
        return _folder() / f"deepspeed_{stem}.json"
    path = Path(value).expanduser()
    if path.is_file():
        return path
    choices = ", ".join(DEEPSPEED_CONFIGS)
    problem = "a folder, not a DeepSpeed JSON file" if path.is_dir() else "no such DeepSpeed config file or name"
    raise LaunchConfigError(f"{value!r}: {problem} (packaged: {choices}, or the path of a JSON file)")


def _deepspeed_file_named(text: str) -> str | None:
    match = _DEEPSPEED_FILE.search(text)
    return yaml.safe_load(match["value"]) if match else None


def _count(what: str, value: int | None) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise LaunchConfigError(f"{what}={value!r}: must be a whole number of at least 1")
    return value


def _render(name: str, num_processes: int | None, num_machines: int | None, deepspeed_file: Path | None) -> str:
    """The packaged YAML with the counts replaced and the DeepSpeed JSON named by `deepspeed_file`
    (a line-by-line rewrite, so the comments stay; the result is checked by parsing it)."""
    counts = {
        "num_processes": _count("num_processes", num_processes),
        "num_machines": _count("num_machines", num_machines),
    }
    text = launch_config_file(name).read_text(encoding="utf-8")
    for key, value in counts.items():
        if value is not None:
            text, replaced = _top_level(key).subn(f"{key}: {value}", text)
            if replaced != 1:
                raise LaunchConfigError(f"{name}.yaml: expected one top-level {key!r}, found {replaced}")
    if deepspeed_file is not None:
        quoted = json.dumps(str(deepspeed_file))  # a JSON string is a YAML double-quoted scalar
        text = _DEEPSPEED_FILE.sub(lambda m: f"{m['indent']} {quoted}", text, count=1)
    settings = yaml.safe_load(text)
    if any(value is not None and settings[key] != value for key, value in counts.items()) or (
        deepspeed_file is not None and settings["deepspeed_config"]["deepspeed_config_file"] != str(deepspeed_file)
    ):
        raise LaunchConfigError(f"{name}.yaml: could not rewrite num_processes, num_machines or the DeepSpeed file")
    if settings["num_processes"] % settings["num_machines"]:
        raise LaunchConfigError(
            f"num_processes={settings['num_processes']} does not divide over num_machines={settings['num_machines']} "
            "(num_processes counts the processes of all machines)"
        )
    return text


def _packaged_deepspeed_file(name: str) -> Path | None:
    named = _deepspeed_file_named(launch_config_file(name).read_text(encoding="utf-8"))
    return None if named is None else deepspeed_config_path(Path(named).stem)


def launch_config(name: str, num_processes: int | None = None, num_machines: int | None = None) -> str:
    """The YAML text of a packaged launch config, its DeepSpeed JSON (if any) named by the
    installed file's absolute path; `num_processes` (over all machines) and `num_machines` replace
    the file's values when given."""
    deepspeed_file = _packaged_deepspeed_file(name)
    return _render(name, num_processes, num_machines, None if deepspeed_file is None else deepspeed_file.resolve())


def write_launch_config(
    name: str,
    directory: str | Path,
    num_processes: int | None = None,
    num_machines: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Write `NAME.yaml` into `directory` and, for a DeepSpeed config, a copy of its JSON beside it
    that the YAML names by absolute path (edit either). Returns the YAML's path. A different file
    already there is kept, with a `LaunchConfigError`, unless `overwrite`."""
    given = Path(directory).expanduser()
    if given.exists() and not given.is_dir():
        raise LaunchConfigError(f"{given}: a file, not a folder to write the launch config into")
    directory = given.resolve()
    files: dict[Path, str] = {}
    packaged_json = _packaged_deepspeed_file(name)
    json_target = None
    if packaged_json is not None:
        json_target = directory / packaged_json.name
        files[json_target] = packaged_json.read_text(encoding="utf-8")
    yaml_target = directory / f"{launch_config_file(name).stem}.yaml"
    files[yaml_target] = _render(name, num_processes, num_machines, json_target)
    for path, text in files.items():
        if path.is_dir():
            raise LaunchConfigError(f"{path}: a folder where the launch config file goes")
        if path.exists() and not overwrite and path.read_bytes() != text.encode("utf-8"):
            raise LaunchConfigError(f"{path}: already exists and differs (overwrite=True / --force replaces it)")
    for path, text in files.items():  # the YAML last: it names the JSON
        if not path.exists() or path.read_bytes() != text.encode("utf-8"):
            write_text_atomically(path, text)
            logger.info("wrote %s", path)
    return yaml_target


def deepspeed_file_of(config: str | Path) -> Path | None:
    """The DeepSpeed JSON a launch config YAML file names, if any."""
    named = _deepspeed_file_named(Path(config).read_text(encoding="utf-8"))
    return None if named is None else Path(named)


__all__ = [
    "DEEPSPEED_CONFIGS",
    "DESCRIPTIONS",
    "LAUNCH_CONFIGS",
    "deepspeed_config_path",
    "deepspeed_file_of",
    "launch_config",
    "launch_config_file",
    "launch_config_names",
    "write_launch_config",
]
