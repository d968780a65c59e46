"""The launch configurations parse with Accelerate's own loader and point at real DeepSpeed files."""

import json
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import ClusterConfig

import medreco

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "accelerate_configs").glob("*.yaml"))


def test_every_setting_is_there():
    names = {p.stem for p in CONFIGS}
    assert {
        "cpu",
        "multi_gpu",
        "deepspeed_zero2",
        "deepspeed_zero3",
        "deepspeed_zero3_offload",
        "fsdp",
        "multi_node_deepspeed_zero3",
    } <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_configs_load_with_accelerate(path):
    config = ClusterConfig.from_yaml_file(str(path))
    assert config.num_processes >= 1 and config.num_machines >= 1
    if config.distributed_type == "DEEPSPEED":
        deepspeed_file = ROOT / config.deepspeed_config["deepspeed_config_file"]
        settings = json.loads(deepspeed_file.read_text())
        assert settings["zero_optimization"]["stage"] in (2, 3)
        assert settings["train_micro_batch_size_per_gpu"] == "auto"
    if config.distributed_type == "FSDP":
        wrapped = config.fsdp_config["fsdp_transformer_layer_cls_to_wrap"]
        assert wrapped in medreco.MedReCoVisionModel._no_split_modules
