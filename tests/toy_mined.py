"""A small learnable task in the layout `medreco mine` writes, for training tests.

Each study is a 40x40 radiograph (PNG) with two independent findings: a bright square on the
left (pleural effusion) and a bright bar at the bottom (cardiomegaly). Relevance under an entity
is agreement on that finding only, so whole-image similarity is not enough and entity
conditioning is what the model must learn."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from medreco.data.mining.mined import SUMMARY_FILE, table_fingerprint

EFFUSION = "cxr/abnormal/pleural-effusion@pleura"
CARDIO = "cxr/abnormal/cardiac-chamber-enlargement@cardiac-chambers"
ENTITIES = (EFFUSION, CARDIO)
RECIPES = {"chest_xray": {"size": [1, 40, 40]}, "chest_ct": {"size": [4, 40, 40], "spacing": [40.0, 8.0, 8.0]}}


def _image(effusion: bool, cardio: bool, rng: np.random.Generator) -> np.ndarray:
    image = rng.normal(90, 12, (40, 40))
    if effusion:
        top, left = rng.integers(8, 22), rng.integers(2, 8)
        image[top : top + 12, left : left + 12] += 120
    if cardio:
        left = rng.integers(8, 20)
        image[30:37, left : left + 16] += 120
    return np.clip(image, 0, 255).astype(np.uint8)


def write_toy_mined(root: str | Path, patients: int = 48, seed: int = 0) -> Path:
    """Write images and the studies/triplets/retrieval/vqa tables; returns the mined folder."""
    import datasets

    root = Path(root)
    rng = np.random.default_rng(seed)
    studies, labels = [], {}
    for index in range(patients):
        study_id = f"T{index:03d}"
        effusion, cardio = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        path = root / "images" / f"{study_id}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(_image(effusion, cardio, rng)).save(path)
        labels[study_id] = {EFFUSION: effusion, CARDIO: cardio}
        sentences = {
            EFFUSION: "Pleural effusion." if effusion else "No pleural effusion.",
            CARDIO: "The heart is enlarged." if cardio else "Normal heart size.",
        }
        statements = {
            entity: {"status": "positive" if present else "negative", "sentences": [sentences[entity]]}
            for entity, present in labels[study_id].items()
        }
        report = " ".join(sentences.values())
        studies.append(
            {
                "study_id": study_id,
                "patient_id": f"P{index:03d}",
                "modality": "chest_xray",
                "image": str(path),
                "report": report,
                "split": "train" if index < patients * 3 // 4 else "test",
                "statements": json.dumps(statements),
            }
        )
    triplets, retrieval, vqa = [], [], []
    for split in ("train", "test"):
        members = [s["study_id"] for s in studies if s["split"] == split]
        for query in members:
            gallery = [s for s in members if s != query]
            for entity in ENTITIES:
                relevant = [s for s in gallery if labels[s][entity] == labels[query][entity]]
                others = [s for s in gallery if labels[s][entity] != labels[query][entity]]
                if relevant and others:
                    retrieval.append(
                        {
                            "query": query,
                            "entity_id": entity,
                            "modality": "chest_xray",
                            "split": split,
                            "gallery": gallery,
                            "relevant": relevant,
                            "irrelevant": others,
                        }
                    )
                    for _ in range(2):
                        triplets.append(
                            {
                                "anchor": query,
                                "positive": str(rng.choice(relevant)),
                                "negative": str(rng.choice(others)),
                                "entity_id": entity,
                                "modality": "chest_xray",
                                "split": split,
                            }
                        )
        pairs = [(members[i], members[(i + shift) % len(members)]) for i in range(len(members)) for shift in (1, 2, 3)]
        for a, b in pairs:
            for entity, noun in ((EFFUSION, "pleural effusion"), (CARDIO, "cardiomegaly")):
                answer = "A" if labels[b][entity] else "B"
                vqa.append(
                    {
                        "study_a": a,
                        "study_b": b,
                        "entity_id": entity,
                        "dimension": "presence",
                        "question": f"Is there {noun} in Case B?",
                        "options": ["Yes", "No"],
                        "answer": answer,
                        "open_question": f"Describe the {noun} in Case B.",
                        "open_answer": f"{'There is' if labels[b][entity] else 'There is no'} {noun}.",
                        "labels": ["Case A", "Case B"],
                        "split": split,
                    }
                )
    mined = root / "mined"
    for name, table in (("studies", studies), ("triplets", triplets), ("retrieval", retrieval), ("vqa", vqa)):
        datasets.Dataset.from_list(table).save_to_disk(str(mined / name))
    # like `medreco mine`, the summary comes last and names the tables it wrote
    tables = {name: table_fingerprint(mined / name) for name in ("studies", "triplets", "retrieval", "vqa")}
    (mined / SUMMARY_FILE).write_text(json.dumps({"tables": tables}))
    return mined


PROGRESSION_CHANGES = ("decreased", "stable", "increased")  # improving, stable, worsening


CHANGE_WORDING = (
    "It has decreased since the prior study.",
    "It is unchanged.",
    "It has increased since the prior study.",
)


def write_toy_longitudinal(root: str | Path, patients: int = 60, seed: int = 0, change_reports: bool = False) -> Path:
    """Two radiographs per patient, a prior and a current one, each with a bright square (pleural
    effusion) whose side changes by -6, 0 or +6 pixels between them: the `longitudinal` table's
    label is decreased, stable or increased. The current square's side is uniform whatever the
    change, so the change is read from the pair, not from the current image. With `change_reports`
    the current report says the change and not the size (what temporal pretraining learns from:
    no single image tells which report is its own), and the square stays centred, as a follow-up
    shows a finding where it was. Returns the mined folder."""
    import datasets

    root = Path(root)
    rng = np.random.default_rng(seed)
    studies, longitudinal = [], []
    for index in range(patients):
        change = int(rng.integers(0, 3))
        current_side = int(rng.integers(10, 19))
        sides = {"prior": current_side - 6 * (change - 1), "current": current_side}
        split = "train" if index < patients * 2 // 3 else "test"
        ids = {}
        for when, side in sides.items():
            study_id = f"L{index:03d}-{when}"
            image = rng.normal(90, 8, (40, 40))
            top, left = rng.integers(2, 40 - side - 1), rng.integers(2, 40 - side - 1)
            if change_reports:  # the finding stays where it was, its centre fixed
                top = left = 20 - side // 2
            image[top : top + side, left : left + side] += 120
            path = root / "images" / f"{study_id}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(path)
            sentence = f"Pleural effusion, {side} mm."
            if change_reports and when == "current":
                sentence = f"Pleural effusion. {CHANGE_WORDING[change]}"
            statement = {EFFUSION: {"status": "positive", "sentences": [sentence]}}
            studies.append(
                {
                    "study_id": study_id,
                    "patient_id": f"P{index:03d}",
                    "modality": "chest_xray",
                    "image": str(path),
                    "report": sentence,
                    "split": split,
                    "statements": json.dumps(statement),
                }
            )
            ids[when] = study_id
        longitudinal.append(
            {
                "prior": ids["prior"],
                "current": ids["current"],
                "patient_id": f"P{index:03d}",
                "entity_id": EFFUSION,
                "label": PROGRESSION_CHANGES[change],
                "attribute": "size" if change != 1 else "overall",
                "split": split,
                "image_answerable": True,
                "answerability_reason": "",
            }
        )
    mined = root / "mined"
    for name, table in (("studies", studies), ("longitudinal", longitudinal)):
        datasets.Dataset.from_list(table).save_to_disk(str(mined / name))
    tables = {name: table_fingerprint(mined / name) for name in ("studies", "longitudinal")}
    (mined / SUMMARY_FILE).write_text(json.dumps({"tables": tables}))
    return mined


def write_ms_cxr_t_csv(data, folder: str | Path, split: str = "test") -> Path:
    """A mined toy folder's (`MinedData`) longitudinal pairs of `split` as an MS-CXR-T CSV (pleural
    effusion; each study's id stands for its DICOM id)."""
    progression = {"decreased": "improving", "stable": "stable", "increased": "worsening"}
    lines = ["subject_id,study_id,dicom_id,previous_study_id,previous_dicom_id,pleural_effusion_progression"]
    lines += [
        f"{r['patient_id']},{r['current']},{r['current']},{r['prior']},{r['prior']},{progression[r['label']]}"
        for r in data.rows("longitudinal", split)
    ]
    csv = Path(folder) / "MS_CXR_T_temporal_image_classification_v1.0.0.csv"
    csv.write_text("\n".join(lines) + "\n")
    return csv
