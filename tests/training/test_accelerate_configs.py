"""The launch configurations ship inside the package, parse with Accelerate's own loader once
written, point at real DeepSpeed files by absolute path, and work from any working folder."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from accelerate.commands.config.config_args import ClusterConfig

import medreco
from medreco.cli import main
from medreco.errors import LaunchConfigError, MedReCoError
from medreco.training.launch import (
    DEEPSPEED_CONFIGS,
    DESCRIPTIONS,
    LAUNCH_CONFIGS,
    deepspeed_config_path,
    launch_config,
    launch_config_file,
    write_launch_config,
)

PACKAGE = Path(medreco.__file__).parent / "training" / "launch" / "configs"
ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_ships_in_the_package():
    assert set(LAUNCH_CONFIGS) == {
        "cpu",
        "multi_gpu",
        "deepspeed_zero2",
        "deepspeed_zero3",
        "deepspeed_zero3_offload",
        "fsdp",
        "multi_node_deepspeed_zero3",
    }
    assert {p.stem for p in PACKAGE.glob("*.yaml")} == set(LAUNCH_CONFIGS) == set(DESCRIPTIONS)
    assert {p.stem for p in PACKAGE.glob("*.json")} == {f"deepspeed_{name}" for name in DEEPSPEED_CONFIGS}


@pytest.mark.parametrize("name", LAUNCH_CONFIGS)
def test_written_configs_load_with_accelerate_and_name_an_existing_json(name, tmp_path):
    written = write_launch_config(name, tmp_path)
    assert written == tmp_path.resolve() / f"{name}.yaml"
    config = ClusterConfig.from_yaml_file(str(written))
    assert config.num_processes >= 1 and config.num_machines >= 1
    assert config.num_processes % config.num_machines == 0
    if config.distributed_type == "DEEPSPEED":
        deepspeed_file = Path(config.deepspeed_config["deepspeed_config_file"])
        assert deepspeed_file.is_absolute() and deepspeed_file.parent == tmp_path.resolve()
        settings = json.loads(deepspeed_file.read_text())
        assert settings["zero_optimization"]["stage"] in (2, 3)
        assert settings["train_micro_batch_size_per_gpu"] == "auto"
    else:
        assert [p.name for p in tmp_path.iterdir()] == [f"{name}.yaml"]
    if config.distributed_type == "FSDP":  # Accelerate wraps the model's own _no_split_modules
        assert config.fsdp_config["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
        assert "fsdp_transformer_layer_cls_to_wrap" not in config.fsdp_config


@pytest.mark.parametrize("name", LAUNCH_CONFIGS)
def test_printed_configs_name_the_installed_json_by_absolute_path(name, tmp_path):
    text = launch_config(name)
    assert text.startswith("#")  # the packaged file's comments are kept
    settings = yaml.safe_load(text)
    packaged = yaml.safe_load(launch_config_file(name).read_text())
    if "deepspeed_config" in packaged:
        deepspeed_file = Path(settings["deepspeed_config"]["deepspeed_config_file"])
        assert deepspeed_file.is_absolute() and deepspeed_file.is_file()
        assert deepspeed_file.name == Path(packaged["deepspeed_config"]["deepspeed_config_file"]).name
        assert settings["deepspeed_config"] == {
            **packaged["deepspeed_config"],
            "deepspeed_config_file": str(deepspeed_file),
        }
    assert {k: v for k, v in settings.items() if k != "deepspeed_config"} == {
        k: v for k, v in packaged.items() if k != "deepspeed_config"
    }


def test_process_and_machine_counts_are_replaced_and_checked():
    settings = yaml.safe_load(launch_config("multi_node_deepspeed_zero3", num_processes=32, num_machines=4))
    assert (settings["num_processes"], settings["num_machines"]) == (32, 4)
    assert yaml.safe_load(launch_config("fsdp", num_processes=4))["num_processes"] == 4
    with pytest.raises(LaunchConfigError, match="does not divide"):
        launch_config("multi_node_deepspeed_zero3", num_machines=3)
    with pytest.raises(LaunchConfigError, match="num_processes=0"):
        launch_config("multi_gpu", num_processes=0)


def test_deepspeed_config_path_by_name_stem_or_file(tmp_path):
    for name in DEEPSPEED_CONFIGS:
        path = deepspeed_config_path(name)
        assert (
            path.is_file() and path == deepspeed_config_path(f"deepspeed_{name}") == PACKAGE / f"deepspeed_{name}.json"
        )
    own = tmp_path / "mine.json"
    own.write_text("{}")
    assert deepspeed_config_path(str(own)) == own
    with pytest.raises(LaunchConfigError) as raised:
        deepspeed_config_path("zero4")
    message = str(raised.value)
    assert isinstance(raised.value, MedReCoError) and isinstance(raised.value, ValueError)
    assert "'zero4'" in message and "zero2, zero3, zero3_offload" in message and "\n" not in message
    with pytest.raises(LaunchConfigError, match="a folder"):
        deepspeed_config_path(tmp_path)
    with pytest.raises(LaunchConfigError, match=r"no such launch config .*deepspeed_zero3"):
        launch_config("zero3")


def test_writing_refuses_to_overwrite_a_different_file(tmp_path):
    written = write_launch_config("deepspeed_zero3", tmp_path, num_processes=4)
    deepspeed_file = tmp_path / "deepspeed_zero3.json"
    assert json.loads(deepspeed_file.read_text()) == json.loads(deepspeed_config_path("zero3").read_text())
    assert write_launch_config("deepspeed_zero3", tmp_path, num_processes=4) == written  # the same files: fine
    deepspeed_file.write_text('{"edited": true}')
    with pytest.raises(LaunchConfigError, match="already exists and differs"):
        write_launch_config("deepspeed_zero3", tmp_path, num_processes=4)
    with pytest.raises(LaunchConfigError, match="already exists and differs"):
        write_launch_config("deepspeed_zero3", tmp_path, num_processes=8)
    assert deepspeed_file.read_text() == '{"edited": true}'  # nothing was written
    assert yaml.safe_load(written.read_text())["num_processes"] == 4
    write_launch_config("deepspeed_zero3", tmp_path, num_processes=8, overwrite=True)
    assert yaml.safe_load(written.read_text())["num_processes"] == 8 and "edited" not in deepspeed_file.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deepspeed_zero3.json", "deepspeed_zero3.yaml"]
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(LaunchConfigError, match="a file, not a folder"):
        write_launch_config("cpu", blocker)


def test_the_cli_prints_a_config_accelerate_loads(tmp_path, capsys):
    assert main(["accelerate-config", "deepspeed_zero3", "--num-processes", "2"]) == 0
    printed = tmp_path / "zero3.yaml"
    printed.write_text(capsys.readouterr().out)
    config = ClusterConfig.from_yaml_file(str(printed))
    assert config.num_processes == 2
    assert Path(config.deepspeed_config["deepspeed_config_file"]) == deepspeed_config_path("zero3").resolve()


def test_the_cli_lists_the_configs(capsys):
    for argv in (["accelerate-config", "--list"], ["accelerate-config"]):
        assert main(argv) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [line.split()[0] for line in lines] == list(LAUNCH_CONFIGS)


def test_the_cli_refuses_an_unknown_name_and_an_existing_different_file(tmp_path, capsys):
    assert main(["accelerate-config", "zero9"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("medreco accelerate-config: error: 'zero9'") and "deepspeed_zero3" in error
    assert "\n" not in error
    assert main(["accelerate-config", "fsdp", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["accelerate-config", "fsdp", "--out", str(tmp_path), "--num-processes", "2"]) == 2
    assert "already exists and differs" in capsys.readouterr().err
    assert main(["accelerate-config", "fsdp", "--out", str(tmp_path), "--num-processes", "2", "--force"]) == 0


def test_the_cli_writes_a_working_config_from_any_folder(tmp_path):
    """A real process whose working folder is not the clone's root."""
    workdir, out = tmp_path / "elsewhere", tmp_path / "configs"
    workdir.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "medreco", "accelerate-config", "deepspeed_zero3", "--out", str(out)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    written = [Path(line) for line in result.stdout.splitlines()]
    assert written == [out.resolve() / "deepspeed_zero3.json", out.resolve() / "deepspeed_zero3.yaml"]
    config = ClusterConfig.from_yaml_file(str(written[1]))
    assert Path(config.deepspeed_config["deepspeed_config_file"]) == written[0]
    assert json.loads(written[0].read_text())["zero_optimization"]["stage"] == 3
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize("name", LAUNCH_CONFIGS)
def test_the_repository_copy_launches_from_a_clones_root_as_it_is(name, monkeypatch):
    """`accelerate launch --config_file accelerate_configs/NAME.yaml` from the root, as TRL's users do."""
    monkeypatch.chdir(ROOT)
    config = ClusterConfig.from_yaml_file(f"accelerate_configs/{name}.yaml")
    if config.distributed_type == "DEEPSPEED":
        named = Path(config.deepspeed_config["deepspeed_config_file"])
        assert not named.is_absolute() and named.is_file() and named.parent == Path("accelerate_configs")


def test_the_package_reads_the_repository_folder_not_a_second_copy():
    """One copy in git: the package's `configs/` is a link to the root's `accelerate_configs/`."""
    link = ROOT / "src" / "medreco" / "training" / "launch" / "configs"
    assert link.is_symlink() and link.resolve() == (ROOT / "accelerate_configs").resolve()
    tracked = subprocess.run(
        ["git", "ls-files", "-s", "src/medreco/training/launch"], cwd=ROOT, capture_output=True, text=True
    )
    if tracked.returncode == 0 and tracked.stdout:  # a git checkout (CI's fresh clone is one)
        modes = {line.split()[-1]: line.split()[0] for line in tracked.stdout.splitlines()}
        assert modes["src/medreco/training/launch/configs"] == "120000"  # a symbolic link
        assert not any(path.endswith((".yaml", ".json")) for path in modes)
