"""Saved folders work outside this repository: plain transformers loads every family, its processor
reads medical files, the model cards' code runs as printed, and TRL's own `trl sft` trains the VLM,
all in processes where `import medreco` fails (without_medreco.py)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from transformers import AutoModel, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

from conftest import example_inputs, main_output, tiny_model
from hub_ready import FAMILIES, write_png
from io_helpers import box_phantom, write_nifti_volume, write_series
from medreco.cli import main
from medreco.data.phantom.dicom import DicomIdentity, write_radiograph
from medreco.factory import bundled_text_encoder_path
from medreco.hub import export_folder
from medreco.processing import MedReCoImageProcessor, MedReCoRetrievalProcessor, RemoteCodeError, flat_sources
from toy_mined import RECIPES
from without_medreco import run_python


def test_flat_sources_rewrite_package_imports_and_refuse_what_cannot_be_flat(tmp_path):
    import medreco.processing.processing_vlm as module

    sources = flat_sources(module.__file__)
    assert {"processing_vlm.py", "image_processing_medreco.py", "errors.py", "atomic.py"} <= set(sources)
    readers = {path.stem for path in (Path(module.__file__).parent / "readers").glob("*.py")} - {"__init__"}
    assert {"readers.py", *(f"readers_{stem}.py" for stem in readers)} <= set(sources)  # a package, laid out flat
    assert "configuration_vision.py" in sources  # the modality table, from medreco.modeling
    for name, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 and f"{node.module}.py" in sources, (name, node.module)
            elif isinstance(node, ast.ImportFrom | ast.Import):
                modules = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any(m.split(".")[0] == "medreco" for m in modules), name
    package = tmp_path / "package"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "errors.py").write_text("X = 1\n")
    (package / "errors.py").write_text("Y = 2\n")
    (package / "sub" / "entry.py").write_text("from .errors import X\nfrom ..errors import Y\n")
    with pytest.raises(RemoteCodeError, match=r"two modules named errors\.py"):
        flat_sources(package / "sub" / "entry.py")
    (package / "sub" / "entry.py").write_text("from .. import errors\n")
    with pytest.raises(RemoteCodeError, match="cannot be laid out flat"):
        flat_sources(package / "sub" / "entry.py")


def test_flat_sources_lay_out_an_imported_package_as_modules_named_after_it(tmp_path):
    import importlib
    import sys

    package = tmp_path / "package"
    (package / "formats" / "deep").mkdir(parents=True)
    (package / "errors.py").write_text("E = 1\n")
    (package / "entry.py").write_text("from .formats import TOTAL\n")
    (package / "formats" / "__init__.py").write_text("from .dicom import D\nfrom .deep import X\n\nTOTAL = D + X\n")
    (package / "formats" / "base.py").write_text("from ..errors import E\n\nB = E + 1\n")
    (package / "formats" / "dicom.py").write_text("from .base import (\n    B,\n)\n\nD = B + 1\n")
    (package / "formats" / "deep" / "__init__.py").write_text("from .leaf import X\n")
    (package / "formats" / "deep" / "leaf.py").write_text(
        "from ...errors import E\nfrom ..base import B\n\nX = E + B\n"
    )
    sources = flat_sources(package / "entry.py")
    assert set(sources) == {
        "entry.py",
        "errors.py",
        "formats.py",
        "formats_base.py",
        "formats_dicom.py",
        "formats_deep.py",
        "formats_deep_leaf.py",
    }
    assert sources["formats.py"].startswith("from .formats_dicom import D\nfrom .formats_deep import X\n")
    assert sources["formats_dicom.py"].count("\n") == 5  # the multi-line import keeps its lines
    flat = tmp_path / "flat_formats"
    flat.mkdir()
    (flat / "__init__.py").write_text("")
    for name, source in sources.items():
        (flat / name).write_text(source)
    assert flat_sources(flat / "entry.py") == sources  # what was laid out flat saves the same files
    sys.path.insert(0, str(tmp_path))
    try:
        assert importlib.import_module("flat_formats.entry").TOTAL == importlib.import_module("package.entry").TOTAL
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith(("flat_formats", "package"))]:
            del sys.modules[name]
    (package / "formats_base.py").write_text("")
    (package / "entry.py").write_text("from .formats import TOTAL\nfrom .formats_base import *\n")
    with pytest.raises(RemoteCodeError, match=r"two modules named formats_base\.py"):
        flat_sources(package / "entry.py")
    (package / "entry.py").write_text("from .nowhere import X\n")
    with pytest.raises(RemoteCodeError, match=r"\.nowhere is neither a module file nor a package"):
        flat_sources(package / "entry.py")


def test_flat_sources_rewrite_multi_line_and_nested_imports_into_a_package_that_imports(tmp_path):
    import importlib
    import sys

    package = tmp_path / "package"
    (package / "shared").mkdir(parents=True)
    (package / "sub").mkdir()
    (package / "shared" / "values.py").write_text("A = 1\nB = 2\n")
    (package / "sub" / "helper.py").write_text("C = 3\n")
    entry = "from ..shared.values import (\n    A,\n    B,\n)\nfrom .helper import C\n\nTOTAL = A + B + C\nLINE = 7\n"
    (package / "sub" / "entry.py").write_text(entry)
    sources = flat_sources(package / "sub" / "entry.py")
    assert set(sources) == {"entry.py", "values.py", "helper.py"}
    assert sources["entry.py"].count("\n") == entry.count("\n")  # line numbers in tracebacks stay right
    flat = tmp_path / "flat_package"
    flat.mkdir()
    (flat / "__init__.py").write_text("")
    for name, source in sources.items():
        (flat / name).write_text(source)
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("flat_package.entry")
        assert module.TOTAL == 6 and module.LINE == 7
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("flat_package")]:
            del sys.modules[name]


def test_every_family_loads_with_the_auto_classes_and_computes_the_same_without_medreco(hub_ready, tmp_path):
    expected = {}
    for family in FAMILIES:  # the reference: each folder loaded here, with medreco
        auto = AutoModelForImageTextToText if family == "vlm" else AutoModel
        model = auto.from_pretrained(hub_ready[family]).eval()
        inputs = example_inputs(model)
        with torch.no_grad():
            expected[family] = main_output(model, model(**inputs))
        torch.save(inputs, tmp_path / f"{family}-inputs.pt")
    result = run_python(
        """
        import torch
        from transformers import AutoModel, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

        found = {}
        for family, folder in ARGS["folders"].items():
            processor = AutoProcessor.from_pretrained(folder, trust_remote_code=True)
            auto = AutoModelForImageTextToText if family == "vlm" else AutoModel
            model = auto.from_pretrained(folder, trust_remote_code=True).eval()
            base = AutoModel.from_pretrained(folder, trust_remote_code=True)
            inputs = torch.load(f"{family}-inputs.pt", weights_only=True)
            with torch.no_grad():
                output = model(**inputs)
            value = next(getattr(output, n) for n in ("logits", "image_embeds", "last_hidden_state")
                         if getattr(output, n, None) is not None)
            torch.save(value, f"{family}-output.pt")
            found[family] = [type(processor).__name__, type(model).__name__, type(base).__name__,
                             type(model).__module__.split(".")[0]]
            # what code outside medreco saves (TRL, Trainer) loads the same way again
            processor.save_pretrained(f"resaved-{family}")
            model.save_pretrained(f"resaved-{family}")
            again = AutoProcessor.from_pretrained(f"resaved-{family}", trust_remote_code=True)
            reloaded = auto.from_pretrained(f"resaved-{family}", trust_remote_code=True).eval()
            with torch.no_grad():
                same = reloaded(**inputs)
            same_value = next(getattr(same, n) for n in ("logits", "image_embeds", "last_hidden_state")
                              if getattr(same, n, None) is not None)
            found[family] += [type(again).__name__ == found[family][0], bool(torch.equal(same_value, value))]
        tokenizer = AutoTokenizer.from_pretrained(ARGS["folders"]["vlm"], trust_remote_code=True)
        found["tokenizer"] = type(tokenizer).__name__
        print(json.dumps(found))
        """,
        tmp_path,
        folders={family: str(folder) for family, folder in hub_ready.items()},
    )
    assert result["vision"][:3] == ["MedReCoImageProcessor", "MedReCoVisionModel", "MedReCoVisionModel"]
    assert result["retrieval"][:3] == ["MedReCoRetrievalProcessor", "MedReCoModel", "MedReCoModel"]
    assert result["reranker"][:3] == ["MedReCoImageProcessor", "MedReCoReranker", "MedReCoReranker"]
    assert result["vlm"][:3] == ["MedReCoProcessor", "MedReCoForConditionalGeneration", "MedReCoVLMModel"]
    assert all(found[3] == "transformers_modules" for family, found in result.items() if family != "tokenizer")
    assert all(found[4:] == [True, True] for family, found in result.items() if family != "tokenizer")
    assert result["tokenizer"] == "BertTokenizer"  # AutoTokenizer reads the folder's tokenizer too
    for family in FAMILIES:
        torch.testing.assert_close(torch.load(tmp_path / f"{family}-output.pt", weights_only=True), expected[family])


def card_code(folder: Path) -> str:
    """The Python block of a folder's model card, as a user would copy it."""
    (block,) = re.findall(r"```python\n(.*?)```", (folder / "README.md").read_text(), flags=re.DOTALL)
    return block


def test_the_cards_code_runs_as_printed_on_dicom_nifti_and_png_without_medreco(hub_ready, tmp_path):
    root = hub_ready["vlm"].parent
    write_series(root / "prior_ct_series", box_phantom())
    write_nifti_volume(root / "current_ct.nii.gz", box_phantom(box=((5, 15), (10, 34), (15, 35))))
    write_radiograph(np.random.default_rng(0).random((60, 50)), (0.2, 0.2), root / "query.dcm", DicomIdentity())
    write_png(root / "reference.png", seed=1)
    for family in ("retrieval", "vlm"):
        code = card_code(hub_ready[family])
        namespace = run_python(
            code
            + "\nprint(json.dumps({'similarity': float(similarity)} if 'similarity' in dir() else "
            + "{'answer': processor.decode(answer[0, inputs['input_ids'].shape[1]:], skip_special_tokens=True), "
            + "'depth': list(inputs['pixel_values'].shape)}))",
            tmp_path,
            cwd=root,
        )
        if family == "retrieval":
            assert -1.0 <= namespace["similarity"] <= 1.0
        else:
            assert namespace["depth"] == [2, 1, 4, 40, 40] and isinstance(namespace["answer"], str)


# A Python whose transformers differs from this one's (.ci/run's newest-stack job sets it): an
# exported folder must work on whatever transformers its user has, not only the one that saved it.
OTHER_PYTHON = os.environ.get("MEDRECO_OTHER_PYTHON")


@pytest.mark.parametrize("interpreter", ["this", "other_transformers"])
def test_the_vlm_stops_at_the_end_of_turn_and_serves_the_pipeline_and_names_bad_files_without_medreco(
    hub_ready, tmp_path, interpreter
):
    python = None
    if interpreter != "this":
        if not OTHER_PYTHON:
            pytest.skip("MEDRECO_OTHER_PYTHON (a Python with another transformers) is not set; .ci/run sets it")
        other = subprocess.run(
            [OTHER_PYTHON, "-c", "import transformers; print(transformers.__version__)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert other != transformers.__version__, f"{OTHER_PYTHON} has this transformers ({other})"
        python = OTHER_PYTHON
    root = hub_ready["vlm"].parent
    write_series(root / "prior_ct_series", box_phantom())
    write_nifti_volume(root / "current_ct.nii.gz", box_phantom())
    for seed, name in enumerate("ab"):
        write_png(tmp_path / f"{name}.png", seed)
    result = run_python(
        """
        import math
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor, pipeline

        folder = ARGS["folder"]
        processor = AutoProcessor.from_pretrained(folder, trust_remote_code=True)
        model = AutoModelForImageTextToText.from_pretrained(folder, trust_remote_code=True).eval()
        end_of_turn = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
        steps = []

        def answer_two_tokens_then_stop(module, args, logits):
            steps.append(1)
            if len(steps) > 2:  # the third generated token is the end of turn
                logits = logits.clone()
                logits[:, -1, end_of_turn] = 1e4
            return logits

        model.lm_head.register_forward_hook(answer_two_tokens_then_stop)
        images = [{"type": "image", "image": ARGS["series"], "modality": "chest_ct"},
                  {"type": "image", "image": ARGS["nifti"], "modality": "chest_ct"}]
        messages = [{"role": "user", "content": [*images, {"type": "text", "text": "Has the mass grown?"}]}]
        inputs = processor.apply_chat_template(messages, tokenize=True, return_dict=True,
                                               add_generation_prompt=True, return_tensors="pt")
        prompt_length = inputs["input_ids"].shape[1]
        generated = model.generate(**inputs, max_new_tokens=20, do_sample=False)[0, prompt_length:]
        pipe = pipeline("image-text-to-text", model=folder, trust_remote_code=True)
        pngs = [{"type": "image", "image": ARGS["png"][0]}, {"type": "image", "image": ARGS["png"][1]}]
        reply = pipe(text=[{"role": "user", "content": [*pngs, {"type": "text", "text": "Which is larger?"}]}],
                     max_new_tokens=4)
        scores = model(**inputs).logits
        try:
            processor.image_processor(ARGS["missing"], modalities="chest_ct")
            error = None
        except Exception as caught:
            error = [type(caught).__name__, str(caught), isinstance(caught, ValueError)]
        print(json.dumps({"generated": generated.tolist(), "end_of_turn": end_of_turn,
                          "eos": model.generation_config.eos_token_id, "reply": reply[0]["generated_text"][-1],
                          "finite": bool(torch.isfinite(scores).all()), "error": error}))
        """,
        tmp_path,
        folder=str(hub_ready["vlm"]),
        series=str(root / "prior_ct_series"),
        nifti=str(root / "current_ct.nii.gz"),
        png=[str(tmp_path / "a.png"), str(tmp_path / "b.png")],
        missing=str(tmp_path / "no-such-scan.nii.gz"),
        python=python,
    )
    assert result["generated"][-1] == result["end_of_turn"] and len(result["generated"]) == 3
    assert result["end_of_turn"] in result["eos"]
    assert result["reply"]["role"] == "assistant" and isinstance(result["reply"]["content"], str)
    assert result["finite"]
    name, message, is_value_error = result["error"]
    assert name == "UnreadableImageError" and "no-such-scan.nii.gz" in message and is_value_error


def test_export_pairs_an_older_stage1_folders_tokenizer_and_image_settings_and_refuses_what_is_no_model(
    tmp_path, capsys
):
    old = tmp_path / "old-stage1"  # before the retrieval processor: tokenizer and image settings side by side
    tiny_model("retrieval").save_pretrained(old)
    AutoTokenizer.from_pretrained(bundled_text_encoder_path()).save_pretrained(old)
    MedReCoImageProcessor(recipes=RECIPES).save_pretrained(old)
    export_folder(old, tmp_path / "exported")
    assert type(AutoProcessor.from_pretrained(tmp_path / "exported")) is MedReCoRetrievalProcessor
    assert (tmp_path / "exported" / "README.md").is_file()
    capsys.readouterr()  # the progress bars of the export above
    assert main(["export", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "not a saved model folder (no config.json)" in error[0]
