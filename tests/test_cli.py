import json
import subprocess
import sys

import pytest
import torch

import medreco
from conftest import tiny_model
from medreco.cli import main


def test_info_reports_total_and_active_parameters_per_modality(capsys):
    assert main(["info", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary) == {"paper", "tiny"}
    for preset in summary.values():
        assert set(preset) == set(medreco.FAMILIES)
        for counts in preset.values():
            assert counts["total"] >= counts["chest_ct"] > 0
    paper_vision = summary["paper"]["vision"]
    assert 100e6 < paper_vision["total"] < 200e6
    assert paper_vision["total"] > paper_vision["chest_xray"]  # other modalities' experts are inactive
    assert summary["paper"]["vlm"]["total"] > 7e9  # Qwen2.5-7B-sized language model, counted on the meta device


def test_info_prints_a_readable_table():
    result = subprocess.run(
        [sys.executable, "-m", "medreco", "info", "--preset", "tiny"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "active for chest_ct" in result.stdout and "retrieval" in result.stdout
    assert "model_configs/tiny.json" in result.stdout  # the preset's file, where a user reads or copies it


def test_a_preset_is_a_data_file_and_a_users_own_file_works_the_same(tmp_path, capsys):
    """Presets live in model_configs/*.json (open_clip's model_configs); a copy with other sizes is a
    preset too, for the factory and for `medreco info`; a bad file is refused naming it."""
    from medreco.errors import PresetError
    from medreco.factory import MODEL_CONFIGS, PRESETS

    assert {p.stem for p in MODEL_CONFIGS.glob("*.json")} == set(PRESETS) == {"paper", "tiny"}
    preset = json.loads((MODEL_CONFIGS / "tiny.json").read_text())
    preset["families"]["reranker"]["hidden_size"] = 48
    mine = tmp_path / "wider.json"
    mine.write_text(json.dumps(preset))
    assert medreco.create_config("reranker", mine).hidden_size == 48
    assert medreco.create_config("reranker", "tiny").hidden_size == 32
    assert main(["info", "--preset", str(mine), "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)[str(mine)]
    assert counts["reranker"]["total"] > medreco.parameter_summary("reranker", "tiny")["total"]
    (tmp_path / "bad.json").write_text('{"families": {"visoin": {}}}')
    with pytest.raises(PresetError, match=r"bad\.json: unknown model families \['visoin'\]"):
        medreco.create_config("vision", tmp_path / "bad.json")
    assert main(["info", "--preset", "nope"]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err
    preset["families"]["vlm"]["case_embeddings"] = -1  # a field its config class refuses
    (tmp_path / "negative.json").write_text(json.dumps(preset))
    assert main(["info", "--preset", str(tmp_path / "negative.json")]) == 2
    error = capsys.readouterr().err.strip()
    assert "case_embeddings must be 0" in error and "\n" not in error and "Traceback" not in error


def test_export_command(tmp_path, capsys):
    tiny_model("reranker").save_pretrained(tmp_path / "ckpt")
    assert main(["export", str(tmp_path / "ckpt"), "--out", str(tmp_path / "out")]) == 0
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["auto_map"]["AutoModel"] == "modeling_reranker.MedReCoReranker"
    assert (tmp_path / "out" / "modeling_reranker.py").exists()


def test_compare_refuses_to_print_a_blank_answer(monkeypatch, capsys):
    from medreco.inference import ComparativeReader

    class BlankReader:
        def answer(self, *args, **kwargs):
            return ""

    monkeypatch.setattr(
        ComparativeReader, "from_pretrained", classmethod(lambda cls, folder, placement=None: BlankReader())
    )
    assert main(["compare", "a.png", "b.png", "--model", "runs/vlm", "--question", "Any change?"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "runs/vlm generated no text" in captured.err


def test_version_verbose_anywhere_and_every_option_explained(capsys):
    """`--version`; `-v` before or after the command; every option has a help text that gives its default."""
    import argparse
    from importlib.metadata import version

    from medreco.cli import build_parser

    parser = build_parser()
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"medreco {version('medreco')}"
    assert parser.parse_args(["-v", "info"]).verbose and parser.parse_args(["info", "-v"]).verbose
    assert not parser.parse_args(["info"]).verbose
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    unexplained, undefaulted = [], []
    for name, command in commands.items():
        text = " ".join(command.format_help().split())
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if not action.help:
                unexplained.append(f"{name} {action.dest}")
            elif action.option_strings and action.default not in (None, False, argparse.SUPPRESS, []):
                shown = " ".join(map(str, action.default)) if isinstance(action.default, list) else action.default
                if f"default {shown}" not in text and "default" not in action.help:
                    undefaulted.append(f"{name} {action.option_strings[-1]}")
    assert unexplained == [] and undefaulted == []


def test_the_ablate_help_names_every_ablation():
    """The help text is written out (building the parser imports no training code): it must list them all."""
    from medreco.cli import build_parser
    from medreco.demo.ablation import ABLATIONS

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    text = " ".join(commands["ablate"].format_help().split()).replace("- ", "-")  # argparse wraps at hyphens
    assert all(ablation.name in text for ablation in ABLATIONS)


def test_the_cached_parameter_counts_are_those_of_the_preset_files():
    """`medreco info` reads the packaged presets' counts from a file: they must be what the models have
    (after changing a preset, `medreco.factory.write_parameter_counts()` rewrites it)."""
    from medreco.factory import FAMILIES, PRESETS, parameter_summary
    from medreco.presets import cached_parameter_counts

    for preset in PRESETS:
        cached = cached_parameter_counts(preset)
        assert cached is not None, (
            f"{preset}: stale parameter_counts.json; run medreco.factory.write_parameter_counts()"
        )
        assert cached == {family: parameter_summary(family, preset) for family in FAMILIES}


def test_a_changed_preset_is_counted_again(tmp_path, monkeypatch):
    from medreco import presets

    changed = tmp_path / "tiny.json"
    changed.write_text(
        presets.PRESET_FILES["tiny"]["file"].read_text().replace('"hidden_size": 32', '"hidden_size": 64')
    )
    monkeypatch.setitem(presets.PRESET_FILES, "tiny", {**presets.PRESET_FILES["tiny"], "file": changed})
    assert presets.cached_parameter_counts("tiny") is None and presets.cached_parameter_counts("paper") is not None


@pytest.mark.parametrize(
    "argv", [["--help"], ["entities", "--modality", "cxr"], ["info", "--preset", "paper"], ["inspect", "{png}"]]
)
def test_the_commands_that_read_no_model_start_without_torch(argv, tmp_path):
    """Their start-up time is measured in benchmarks/cli_startup.py; here, what makes it: torch,
    transformers and the models are not imported at all (`python -X importtime` lists every import)."""
    from hub_ready import write_png

    png = str(write_png(tmp_path / "image.png"))
    argv = [png if a == "{png}" else a for a in argv]
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "medreco", *argv], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    imported = {
        line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time")
    }
    assert not {"torch", "transformers", "medreco.modeling", "medreco.factory"} & imported


def test_every_lazy_package_exports_what_it_lists():
    """`__all__` and the `if TYPE_CHECKING:` imports name the same things, and each loads."""
    import importlib

    from medreco.lazy import exported_names

    for name in ("medreco", "medreco.processing", "medreco.inference", "medreco.data.reports"):
        package = importlib.import_module(name)
        listed = set(exported_names(package.__file__))
        assert listed <= set(package.__all__) and set(package.__all__) - listed <= set(vars(package)), name
        assert all(getattr(package, export) is not None for export in listed)


def test_preprocess_matches_a_model_or_preset_with_window_and_dtype(tmp_path, capsys):
    """`medreco preprocess` writes what a given model reads: its size (a saved folder, with or without
    its processor, or a preset), an optional CT window, the dtype asked for; a folder as --out is
    refused before the image is read."""
    import stat

    from safetensors import safe_open

    from io_helpers import box_phantom, write_nifti_volume

    ct = write_nifti_volume(tmp_path / "ct.nii.gz", box_phantom(), spacing=(20.0, 8.0, 8.0))  # the box fills voxels
    medreco.create_model("vision", "tiny").save_pretrained(tmp_path / "vision")  # no processor saved
    written = {}
    for name, extra in {
        "preset": ["--preset", "tiny"],
        "model": ["--model", str(tmp_path / "vision")],
        "window": ["--preset", "tiny", "--window", "300,500", "--dtype", "float16"],
    }.items():
        out = tmp_path / f"{name}.safetensors"
        assert main(["preprocess", str(ct), "--modality", "chest_ct", "--out", str(out), *extra]) == 0
        with safe_open(out, "pt") as tensors:
            written[name] = tensors.get_tensor("pixel_values")
        assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~_umask()
    assert written["preset"].shape == written["model"].shape == (1, 8, 40, 40)
    assert torch.equal(written["preset"], written["model"])
    assert written["window"].dtype == torch.float16
    # the box (400 HU): 0.7 of the default window [-1000, 1000], 0.5 of [300, 500]
    assert written["preset"].max() == pytest.approx(0.7, abs=0.01)
    assert written["window"].float().max() == pytest.approx(0.5, abs=0.01)
    assert "(1, 8, 40, 40) float16" in capsys.readouterr().out
    (tmp_path / "a-folder").mkdir()
    assert main(["preprocess", str(ct), "--modality", "chest_ct", "--out", str(tmp_path / "a-folder")]) == 2
    assert "a folder; --out names the .safetensors file" in capsys.readouterr().err
    png = tmp_path / "x.png"
    from hub_ready import write_png

    write_png(png)
    argv = ["preprocess", str(png), "--modality", "cxr", "--out", str(tmp_path / "x.safetensors"), "--window", "0,1"]
    assert main(argv) == 2 and "--window is a CT window" in capsys.readouterr().err


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_entities_shows_names_a_reader_reads(capsys):
    assert main(["entities", "--modality", "CT"]) == 0
    out = capsys.readouterr().out
    assert "_" not in out and "liver / hepatic parenchyma" in out


def test_phantom_refuses_no_studies_in_the_options_words(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["phantom", "--out", "x", "--studies", "0"])
    assert exit_.value.code == 2 and "--studies: 0 is not at least 1" in capsys.readouterr().err
