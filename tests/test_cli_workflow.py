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
