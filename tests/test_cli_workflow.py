"""The command line end to end on a trained toy model: index, search, evaluate, compare (on `--device cpu`)."""

from __future__ import annotations

import json

from medreco.data.mining import MinedData
from medreco.training.stage2 import Stage2Trainer
from toy_training import stage2_config


def test_cli_index_search_evaluate_and_compare(stage1_run, toy, tmp_path, capsys):
    from medreco.cli import main

    _, out, _, _ = stage1_run
    model = str(out / "final")
    data = MinedData(toy)
    query = sorted(data.studies)[0]
    assert (
        main(
            [
                "index",
                "--model",
                model,
                "--mined",
                str(toy),
                "--out",
                str(tmp_path / "index"),
                "--entity",
                "Pleural effusion",
                "--quiet",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["studies"] == {"chest_xray": len(data.studies)}
    assert (
        main(
            [
                "search",
                data.studies[query].image,
                "--index",
                str(tmp_path / "index"),
                "--model",
                model,
                "--modality",
                "chest_xray",
                "--entity",
                "Pleural effusion",
                "--exclude",
                query,
                "--json",
                "--plot",
                str(tmp_path / "montage.png"),
                "--device",
                "cpu",
                "--dtype",
                "float32",
            ]
        )
        == 0
    )
    hits = json.loads(capsys.readouterr().out.split("montage written")[0])
    assert len(hits) == 5 and query not in [h["study_id"] for h in hits]
    relevant = {
        s
        for s, study in data.studies.items()
        if study.status("cxr/abnormal/pleural-effusion@pleura")
        == data.studies[query].status("cxr/abnormal/pleural-effusion@pleura")
    }
    assert sum(h["study_id"] in relevant for h in hits) >= 4  # the trained model retrieves the same finding
    assert (tmp_path / "montage.png").stat().st_size > 5000
    assert (
        main(["evaluate", "--model", model, "--mined", str(toy), "--out", str(tmp_path / "eval.json"), "--quiet"]) == 0
    )
    assert "entity R@1/3/5" in capsys.readouterr().out
    assert json.loads((tmp_path / "eval.json").read_text())["summary"]["all"]["all"]["queries"] > 0

    trainer = Stage2Trainer(stage2_config(toy, out / "final", tmp_path / "vlm", "optimization.max_steps=2"))
    trainer.train()
    second = sorted(data.studies)[1]
    assert (
        main(
            [
                "compare",
                data.studies[query].image,
                data.studies[second].image,
                "--model",
                str(tmp_path / "vlm" / "final"),
                "--question",
                "Is there pleural effusion in Case B?",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip() != ""  # an (untrained, short) answer in text


def test_a_model_created_and_saved_without_its_processor_works_with_every_command(toy, tmp_path, capsys):
    """`create_model(...).save_pretrained(folder)` alone, as a user would: index, search (with a
    created reranker), compare and export build the processor from the folder's config."""
    from transformers import AutoProcessor

    import medreco
    from medreco.cli import main

    retrieval, reranker, vlm = tmp_path / "retrieval", tmp_path / "reranker", tmp_path / "vlm"
    medreco.create_model("retrieval", "tiny", text_model_name_or_path=medreco.BUNDLED_TEXT_ENCODER).save_pretrained(
        retrieval
    )
    medreco.create_model("reranker", "tiny").save_pretrained(reranker)
    medreco.create_model("vlm", "tiny").save_pretrained(vlm)
    capsys.readouterr()  # DeepSpeed, when installed, prints a line to stdout at its first import
    data = MinedData(toy)
    first, second = sorted(data.studies)[:2]
    index = ["index", "--model", str(retrieval), "--mined", str(toy), "--out", str(tmp_path / "index"), "--quiet"]
    assert main(index) == 0
    assert json.loads(capsys.readouterr().out)["studies"] == {"chest_xray": len(data.studies)}
    search = [
        *("search", data.studies[first].image, "--index", str(tmp_path / "index"), "--model", str(retrieval)),
        *("--modality", "chest_xray", "--entity", "pleural effusion", "--reranker", str(reranker), "--json"),
    ]
    assert main(search) == 0
    hits = json.loads(capsys.readouterr().out)
    assert len(hits) == 5 and all(h["reranker_probability"] is not None for h in hits)
    compare = [
        *("compare", data.studies[first].image, data.studies[second].image, "--model", str(vlm)),
        *("--question", "Is there pleural effusion in Case B?"),
    ]
    assert main(compare) == 0
    assert capsys.readouterr().out.strip() != ""  # untrained, but an answer in text
    for folder in (retrieval, vlm):
        assert main(["export", str(folder), "--out", str(tmp_path / f"{folder.name}-export")]) == 0
        exported = tmp_path / f"{folder.name}-export"
        assert (exported / "processor_config.json").is_file()
        assert type(AutoProcessor.from_pretrained(exported)) is type(AutoProcessor.from_pretrained(folder))


def test_a_folder_whose_processor_cannot_be_built_fails_in_one_line(tmp_path, capsys):
    import medreco
    from medreco.cli import main

    medreco.create_model("retrieval", "tiny").save_pretrained(tmp_path / "bare")  # names no text encoder
    assert main(["export", str(tmp_path / "bare"), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "no tokenizer saved" in error and "tokenizer.save_pretrained" in error
