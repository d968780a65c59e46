"""Public paired-image evaluation sets run on a trained MedReCo VLM (paper, section 2 and Table S18).

- **MMXU** (multiple choice about a current and a prior radiograph): accuracy overall and by
  content type, answered like our closed questions (the option letter with the highest logit).
- **MS-CXR-T** (progression of five findings between a prior and a current radiograph): each
  labelled finding becomes a closed question "How has the {finding} changed from the prior to the
  current study?" with the options decreased / stable / increased (improving / stable / worsening);
  accuracy by finding, the class-balanced macro-accuracy of BioViL-T and TILA, and the confusion matrix.
- **Medical-Diff-VQA** (open "what has changed" questions about a study against an earlier one):
  answers are generated and scored with BLEU-4, ROUGE-L, METEOR, entity F1, and RaTEScore and
  RadGraph F1 when their packages and models are available (else the reason is recorded).
- **CXR-Align** (CLIP-clinic: a report against its variant with one finding negated, and omitted),
  on a stage-1 retrieval model: the image's whole-image feature must prefer the report
  (`evaluation.negation`, the same code as the protocol built from mined reports).

Their files come from their publishers (credentialed access); the images are found under
an image root in the MIMIC-CXR(-JPG) layout (`files/pXX/pSUBJECT/sSTUDY/<dicom_id>.jpg`). The
readers are in `medreco.data.public_datasets`."""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from statistics import mean
from types import SimpleNamespace

from ..data.mining.vqa import LETTERS
from ..data.public_datasets import (
    MS_CXR_T_FINDINGS,
    ChoiceQuestion,
    DifferenceQuestion,
    ProgressionItem,
    cxr_align,
    medical_diff_vqa,
    mmxu,
    ms_cxr_t,
)
from ..errors import MedReCoError
from ..hub.download import model_folder
from ..inference.device import InferenceDevice
from ..modeling import PROGRESSION_CLASSES
from .metrics import balanced_accuracy
from .text import available_report_metrics
from .vqa import accuracy_summary, closed_accuracy, confusion_table, evaluate_open_ended, sample_rows

logger = logging.getLogger(__name__)

PUBLIC_SETS = ("mmxu", "ms-cxr-t", "medical-diff-vqa", "cxr-align")
IMAGE_SUFFIXES = (".dcm", ".jpg", ".jpeg", ".png")
PROGRESSION_OPTIONS = {"improving": "decreased", "stable": "stable", "worsening": "increased"}


class PublicSetDataError(MedReCoError, ValueError):
    """An item of a public set whose image cannot be found, or an unknown set; names both."""


class ImageLocator:
    """Finds a set's images under its root: by relative path (MMXU), by DICOM id (MS-CXR-T) or
    by study id (Medical-Diff-VQA). The file-name index is built once, on first use."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if not self.root.is_dir():
            raise PublicSetDataError(f"{self.root}: image root not found")
        self._by_stem: dict[str, Path] | None = None
        self._by_study: dict[str, Path] | None = None

    def _index(self) -> None:
        self._by_stem, self._by_study = {}, {}
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES:
                self._by_stem.setdefault(path.stem, path)
                self._by_study.setdefault(path.parent.name.removeprefix("s"), path)

    def relative(self, path: str, item: str) -> str:
        candidate = self.root / path
        if not candidate.is_file():
            raise PublicSetDataError(f"{candidate}: image of {item} not found under {self.root}")
        return str(candidate)

    def by_dicom_id(self, dicom_id: str, item: str) -> str:
        if self._by_stem is None:
            self._index()
        if dicom_id not in self._by_stem:
            raise PublicSetDataError(f"{self.root}: no image named {dicom_id}.* for {item}")
        return str(self._by_stem[dicom_id])

    def by_study(self, study_id: str, item: str) -> str:
        """The first image (by name) of the study's folder (`s{study_id}` or `{study_id}`)."""
        if self._by_study is None:
            self._index()
        key = str(study_id).removeprefix("s")
        if key not in self._by_study:
            raise PublicSetDataError(f"{self.root}: no image folder for study {study_id} of {item}")
        return str(self._by_study[key])


def _pair_rows(pairs: Sequence[tuple[str, str, str, list[str], str]]) -> tuple[list[dict], dict]:
    """Closed rows (prior = study_a, current = study_b) and the `studies` table keyed by image path."""
    rows, studies = [], {}
    for prior, current, question, options, answer in pairs:
        for image in (prior, current):
            studies[image] = SimpleNamespace(image=image, modality="chest_xray")
        rows.append({"study_a": prior, "study_b": current, "question": question, "options": options, "answer": answer})
    return rows, studies


def evaluate_mmxu(
    model, processor, items: Sequence[ChoiceQuestion], images: ImageLocator, progress: bool = False
) -> dict:
    """Accuracy (with 95% Wilson interval) overall and by content type."""
    pairs = [
        (
            images.relative(item.prior_image, f"MMXU item {item.id}"),
            images.relative(item.current_image, f"MMXU item {item.id}"),
            item.question,
            item.options,
            item.answer,
        )
        for item in items
    ]
    rows, studies = _pair_rows(pairs)
    result = closed_accuracy(model, processor, rows, studies, progress)
    by_type = defaultdict(list)
    for item, hit in zip(items, result["correct"], strict=True):
        by_type[item.content_type or "unspecified"].append(hit)
    return {
        **accuracy_summary(result["correct"]),
        "by_content_type": {name: accuracy_summary(hits) for name, hits in sorted(by_type.items())},
        "predictions": [{"id": item.id, "predicted": p} for item, p in zip(items, result["predicted"], strict=True)],
    }


def progression_question(finding: str) -> tuple[str, list[str]]:
    """The closed question asked for one MS-CXR-T finding, in the wording of our follow-up questions."""
    noun = finding.replace("_", " ")
    return f"How has the {noun} changed from the prior to the current study?", list(PROGRESSION_OPTIONS.values())


def evaluate_ms_cxr_t(
    model, processor, items: Sequence[ProgressionItem], images: ImageLocator, progress: bool = False
) -> dict:
    """Accuracy by finding and overall, the macro-accuracy of BioViL-T and TILA (per finding, the
    mean over progression classes of the share answered right; then the mean over findings), and
    the confusion matrix (rows: true progression, columns: the progression of the chosen option)."""
    pairs, labels = [], []
    for item in items:
        name = f"MS-CXR-T study {item.study_id}"
        prior = images.by_dicom_id(item.previous_dicom_id, name)
        current = images.by_dicom_id(item.dicom_id, name)
        for finding, label in sorted(item.labels.items()):
            if label not in PROGRESSION_OPTIONS:
                raise PublicSetDataError(
                    f"{name}: progression {label!r} of {finding} is not one of {', '.join(PROGRESSION_OPTIONS)}"
                )
            question, options = progression_question(finding)
            answer = LETTERS[options.index(PROGRESSION_OPTIONS[label])]
            pairs.append((prior, current, question, options, answer))
            labels.append((finding, label))
    rows, studies = _pair_rows(pairs)
    result = closed_accuracy(model, processor, rows, studies, progress)
    by_finding, truths, choices = defaultdict(list), defaultdict(list), defaultdict(list)
    confusion = {label: Counter() for label in PROGRESSION_OPTIONS}
    chosen_progression = {option: label for label, option in PROGRESSION_OPTIONS.items()}
    for (finding, label), row, letter, hit in zip(labels, rows, result["predicted"], result["correct"], strict=True):
        chosen = chosen_progression[row["options"][LETTERS.index(letter)]]
        by_finding[finding].append(hit)
        truths[finding].append(label)
        choices[finding].append(chosen)
        confusion[label][chosen] += 1
    per_finding = {
        name: {**accuracy_summary(hits), "macro_accuracy": balanced_accuracy(truths[name], choices[name])}
        for name, hits in sorted(by_finding.items())
    }
    return {
        **accuracy_summary(result["correct"]),
        # BioViL-T / TILA: per finding, the mean of the per-class accuracies; then the mean over findings
        "macro_accuracy": mean(v["macro_accuracy"] for v in per_finding.values()) if per_finding else 0.0,
        "mean_finding_accuracy": mean(v["accuracy"] for v in per_finding.values()) if per_finding else 0.0,
        "by_finding": per_finding,
        "confusion": confusion_table(confusion, list(PROGRESSION_OPTIONS)),
    }


def evaluate_medical_diff_vqa(
    reader,
    items: Sequence[DifferenceQuestion],
    images: ImageLocator,
    bert_scorer=None,
    progress: bool = False,
    report_metrics: Sequence = (),
) -> dict:
    """Open-ended scores of the generated answers (the reference study is the prior, "Case A"),
    with RaTEScore / RadGraph F1 for each of `report_metrics`."""
    rows, studies = [], {}
    for item in items:
        name = f"Medical-Diff-VQA study {item.study_id}"
        prior, current = images.by_study(item.reference_study_id, name), images.by_study(item.study_id, name)
        for image in (prior, current):
            studies[image] = SimpleNamespace(image=image, modality="chest_xray")
        rows.append({"study_a": prior, "study_b": current, "open_question": item.question, "open_answer": item.answer})
    return evaluate_open_ended(reader, rows, studies, bert_scorer, progress, report_metrics)


def evaluate_ms_cxr_t_progression(
    predictor, items: Sequence[ProgressionItem], images: ImageLocator, progress: bool = False
) -> dict:
    """MS-CXR-T on a progression model (`inference.ProgressionPredictor`, or zero-shot
    `inference.ZeroShotProgressionPredictor`): TILA's four protocols
    by class-balanced macro-accuracy, per finding (`by_group`) and over all labelled pairs, with
    intervals clustered by subject, through the same code as the mined longitudinal pairs. Each
    finding is read through its vocabulary entity (its name where the vocabulary has none). The
    majority baseline's constant answer scores 1/3 whichever class it is."""
    from ..data.mining import ProgressionPair
    from ..data.reports.ontology import Ontology
    from .temporal import score_progression

    ontology = Ontology.load()

    def entity_of(finding: str) -> str:
        try:
            return ontology.find(finding.replace("_", " "), "chest_xray").id
        except (KeyError, ValueError):
            return finding.replace("_", " ")

    entities = {finding: entity_of(finding) for finding in MS_CXR_T_FINDINGS}
    pairs, groups, studies = [], [], {}
    for item in items:
        name = f"MS-CXR-T study {item.study_id}"
        current = images.by_dicom_id(item.dicom_id, name)
        prior = images.by_dicom_id(item.previous_dicom_id, name)
        for image in (prior, current):
            studies[image] = SimpleNamespace(image=image, modality="chest_xray")
        for finding, label in item.labels.items():
            if label not in PROGRESSION_OPTIONS:
                continue
            pairs.append(ProgressionPair(prior, current, item.subject_id, entities[finding], label))
            groups.append(finding)
    labels = [PROGRESSION_CLASSES.index(p.progression) for p in pairs]
    result = score_progression(predictor, pairs, studies, labels, groups, progress=progress)
    return {"findings": entities, **result}


def evaluate_cxr_align(encoder, cases: Sequence, images: ImageLocator, progress: bool = False) -> dict:
    """CXR-Align's two tasks on a retrieval model: each case's image (its key read as a DICOM id, else
    as a study id) encoded once, whole-image features against the three reports. The file names no
    patients, so each case is its own cluster."""
    from .negation import WHOLE_IMAGE, negation_alignment

    def image_of(case) -> str:
        try:
            return images.by_dicom_id(case.case_id, f"CXR-Align case {case.case_id}")
        except PublicSetDataError:
            return images.by_study(case.case_id, f"CXR-Align case {case.case_id}")

    paths = [image_of(case) for case in cases]
    ids = [case.case_id for case in cases]
    features = {}
    for block in encoder.encode_images(paths, ["chest_xray"] * len(cases), ids, progress=progress):
        found, _ = encoder.condition(block.tokens, block.modality_ids, None)
        features.update(zip(block.study_ids, found, strict=True))
    result = negation_alignment(encoder, cases, features, {c: c for c in ids})
    del result["case_ids"]
    for task in ("negated", "omitted"):
        result[task].pop("correct")
    return {"feature": WHOLE_IMAGE, **result}


def run_public_set(
    name: str,
    model_dir: str | Path,
    data_path: str | Path,
    image_root: str | Path,
    limit: int | None = None,
    split: str = "test",
    seed: int = 0,
    progress: bool = True,
    placement: InferenceDevice | None = None,
) -> dict:
    """Load a saved VLM (a folder or Hub repository, on `placement`'s device) and run the public set
    `name` (one of `PUBLIC_SETS`) on at most `limit` items drawn reproducibly. Medical-Diff-VQA uses
    its `split` and the "difference" questions; CXR-Align takes a stage-1 retrieval model and reads
    `split` as the file's part ("mimic" or "openi"; "test" means "mimic")."""
    from ..inference import ComparativeReader

    if name not in PUBLIC_SETS:
        raise PublicSetDataError(f"unknown public evaluation set {name!r}; choose one of {', '.join(PUBLIC_SETS)}")
    readers = {
        "mmxu": mmxu,
        "ms-cxr-t": ms_cxr_t,
        "medical-diff-vqa": lambda path: medical_diff_vqa(path, split=split),
        "cxr-align": lambda path: cxr_align(path, "mimic" if split == "test" else split),
    }
    items = sample_rows(readers[name](data_path), limit, seed)
    if not items:
        raise PublicSetDataError(f"{data_path}: no {name} items to evaluate (check the file and the split)")
    images = ImageLocator(image_root)
    if name == "cxr-align":
        from ..inference import RetrievalEncoder

        encoder = RetrievalEncoder.from_pretrained(model_dir, placement)
        return {
            "set": name,
            "items": len(items),
            "model": str(model_dir),
            **evaluate_cxr_align(encoder, items, images, progress),
        }
    reading = _temporal_reading(model_dir) if name == "ms-cxr-t" else None
    if reading is not None:
        from ..inference import ProgressionPredictor, ZeroShotProgressionPredictor

        predictor_class = ProgressionPredictor if reading == "fine-tuned" else ZeroShotProgressionPredictor
        predictor = predictor_class.from_pretrained(model_dir, placement)
        result = evaluate_ms_cxr_t_progression(predictor, items, images, progress)
        return {"set": name, "items": len(items), "model": str(model_dir), "reading": reading, **result}
    reader = ComparativeReader.from_pretrained(model_dir, placement)
    if name == "mmxu":
        result = evaluate_mmxu(reader.model, reader.processor, items, images, progress)
    elif name == "ms-cxr-t":
        result = evaluate_ms_cxr_t(reader.model, reader.processor, items, images, progress)
    else:
        metrics, unavailable = available_report_metrics()
        result = evaluate_medical_diff_vqa(reader, items, images, progress=progress, report_metrics=metrics)
        result["unavailable_metrics"] = unavailable
    logger.info("%s: %d items evaluated", name, len(items))
    return {"set": name, "items": len(items), "model": str(model_dir), **result}


def _temporal_reading(model_dir: str | Path) -> str | None:
    """How a retrieval model reads change: "fine-tuned" (saved with a progression head, `medreco
    train progression`), "zero-shot" (prior-image fusion pretrained in stage 1, no head: text
    prompts), or None (a VLM, or a static retrieval model)."""
    config = model_folder(model_dir) / "config.json"
    if not config.is_file():
        return None
    document = json.loads(config.read_text())
    if document.get("model_type") != "medreco":
        return None
    if document.get("progression_head"):
        return "fine-tuned"
    return "zero-shot" if (document.get("vision_config") or {}).get("num_temporal_layers") else None


__all__ = [
    "PUBLIC_SETS",
    "PublicSetDataError",
    "ImageLocator",
    "evaluate_medical_diff_vqa",
    "evaluate_mmxu",
    "evaluate_cxr_align",
    "evaluate_ms_cxr_t",
    "evaluate_ms_cxr_t_progression",
    "progression_question",
    "run_public_set",
]
