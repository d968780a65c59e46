"""Model cards (`README.md` with Hub metadata) for saved MedReCo models.

A card is built only from what the caller passes (training summaries, evaluation scores, a
description of the data), never from image headers, so no identifying DICOM attribute can reach
it. `huggingface_hub.ModelCard` writes the YAML metadata the Hub reads: licence, library,
pipeline tag, base model, datasets, tags and a `model-index` with the evaluation scores."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..atomic import atomic_path


def transformers_requirement() -> str:
    """The transformers versions this medreco was tested with, as its package metadata declares them
    (e.g. `transformers>=5.23,<6`): what a card tells a user to install beside the folder's code."""
    try:
        requirements = metadata.requires("medreco") or []
    except metadata.PackageNotFoundError:
        requirements = []
    for requirement in requirements:
        if re.match(r"transformers\b", requirement) and "extra ==" not in requirement:
            return requirement.split(";")[0].replace(" ", "")
    return "transformers"


@dataclass(frozen=True)
class Family:
    auto_class: str
    description: str
    pipeline_tag: str | None
    task_type: str  # the model-index task its scores belong to


FAMILIES = {
    "vision": Family(
        "AutoModel",
        "mixture-of-modality-experts vision encoder for 2D and 3D studies",
        "image-feature-extraction",
        "image-feature-extraction",
    ),
    "retrieval": Family(
        "AutoModel",
        "entity-conditioned retrieval model (vision encoder, text encoder, conditioner)",
        "image-feature-extraction",
        "image-feature-extraction",
    ),
    "reranker": Family(
        "AutoModel",
        "cross-attention reranker over entity-attended visual tokens",
        None,
        "image-feature-extraction",
    ),
    "vlm": Family(
        "AutoModelForImageTextToText",
        "comparative vision-language model (two studies and a question)",
        "image-text-to-text",
        "visual-question-answering",
    ),
}
# How a user calls the loaded model, after `processor` and `model` are loaded (the card's Use section)
USAGE = {
    "vlm": (
        'messages = [{"role": "user", "content": [',
        '    {"type": "image", "image": "prior_ct_series/", "modality": "chest_ct"},',
        '    {"type": "image", "image": "current_ct.nii.gz", "modality": "chest_ct"},',
        '    {"type": "text", "text": "Has the pleural effusion changed?"}]}]',
        "inputs = processor.apply_chat_template(messages, tokenize=True, return_dict=True,",
        '                                       add_generation_prompt=True, return_tensors="pt")',
        "answer = model.generate(**inputs, max_new_tokens=64)",
        'print(processor.decode(answer[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))',
    ),
    "retrieval": (
        'images = processor(images=["query.dcm", "reference.png"], modalities="chest_xray")',
        'entity = model.get_text_embeddings(**processor(text=["pleural effusion"]))',
        "features = model.get_image_features(**images, entity_embeddings=entity, pairwise=True).features[0]",
        "similarity = model.score(features[0], features[1])  # entity-specific, in [-1, 1]",
    ),
}
SYNTHETIC_COHORT = "medreco-synthetic-cohort"
PRIVACY = (
    "medreco never copies identifying DICOM attributes (names, IDs, dates of birth, institution) into "
    "model folders: this card is written from training summaries and evaluation scores only, and the "
    "configuration holds architecture settings, not image headers. Weights trained on patient data can "
    "still memorise it; share such models only as your data agreements allow."
)


@dataclass(frozen=True)
class Score:
    """One evaluation result: `value` of `metric` on `task`, with its 95% interval and sample count
    when known (they go into the card's table and the metric's name in the model-index)."""

    task: str
    metric: str
    value: float
    interval: tuple[float, float] | None = None
    n: int | None = None
    dataset: str = SYNTHETIC_COHORT
    split: str = "test"

    def label(self) -> str:
        extras = []
        if self.interval is not None:
            extras.append(f"95% CI {self.interval[0]:.4f}-{self.interval[1]:.4f}")
        if self.n is not None:
            extras.append(f"n={self.n}")
        return f"{self.task}: {self.metric}" + (f" ({', '.join(extras)})" if extras else "")


def model_card(
    family: str,
    training: dict | None = None,
    evaluation: list[Score | tuple[str, str, float]] | None = None,
    data_description: str = "",
    limitations: str = "",
    base_model: str | list[str] | None = None,
    datasets: list[str] | None = None,
    model_name: str | None = None,
) -> ModelCard:
    """The card of a model of `family` (see `FAMILIES`). `training`: phase name -> summary (steps,
    first/last loss); `evaluation`: scores (or (task, metric, value) rows); `base_model`: the
    pretrained models it starts from; `datasets`: Hub ids of its training data."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {sorted(FAMILIES)}")
    kind = FAMILIES[family]
    scores = [score if isinstance(score, Score) else Score(*score) for score in evaluation or []]
    name = model_name or f"medreco-{family}"
    metadata = _card_metadata(family, kind, scores, name, base_model, datasets)
    lines = [
        *_description_lines(family, kind, name, data_description),
        *_training_table(training),
        *_evaluation_table(scores),
        *_closing_lines(limitations),
    ]
    return ModelCard(f"---\n{metadata.to_yaml()}\n---\n\n" + "\n".join(lines))


def _card_metadata(
    family: str,
    kind: Family,
    scores: list[Score],
    name: str,
    base_model: str | list[str] | None,
    datasets: list[str] | None,
) -> ModelCardData:
    """The YAML metadata the Hub reads, with a `model-index` entry per score."""
    return ModelCardData(
        license="apache-2.0",
        library_name="transformers",
        pipeline_tag=kind.pipeline_tag,
        base_model=base_model,
        datasets=datasets,
        tags=["medreco", "radiology", "medical-imaging", "comparative-reasoning", f"medreco-{family}"],
        model_name=name if scores else None,
        eval_results=[_eval_result(kind, score) for score in scores] or None,
    )


def _eval_result(kind: Family, score: Score) -> EvalResult:
    return EvalResult(
        task_type=kind.task_type,
        task_name=score.task,
        dataset_type=score.dataset,
        dataset_name=score.dataset,
        dataset_config=score.task,  # one model-index entry per task
        dataset_split=score.split,
        metric_type=score.metric,
        metric_name=score.label(),
        metric_value=round(float(score.value), 6),
    )


def _description_lines(family: str, kind: Family, name: str, data_description: str) -> list[str]:
    """Title, intended use, how to load and call the model, and its training data."""
    return [
        f"# {name}",
        "",
        f"A {kind.description}, from the `medreco` package (MedReCo: comparative reasoning in radiology).",
        "",
        "## Intended use",
        "",
        "Research on comparative reading of radiology studies: retrieving reference cases by a clinical",
        "finding and comparing a study with a prior or a reference. Not a medical device; not for",
        "diagnosis or any clinical decision.",
        "",
        "## Use",
        "",
        "```python",
        f"from transformers import AutoProcessor, {kind.auto_class}",
        f'processor = AutoProcessor.from_pretrained("{name}", trust_remote_code=True)',
        f'model = {kind.auto_class}.from_pretrained("{name}", trust_remote_code=True)',
        *USAGE.get(family, ()),
        "```",
        "",
        "The folder carries its model and processor code, so it loads without medreco installed",
        f'(`pip install torch "{transformers_requirement()}" pillow pydicom nibabel` reads DICOM, NIfTI, PNG and',
        "JPEG). With medreco installed, `import medreco` registers the model types and `trust_remote_code` is",
        "not needed.",
        "",
        "## Training data",
        "",
        data_description or "Not described.",
        "",
    ]


def _training_table(training: dict | None) -> list[str]:
    """The Training section (steps and first/last loss per phase), or nothing without a summary."""
    if not training:
        return []
    lines = ["## Training", "", "| phase | steps | first loss | last loss |", "|---|---|---|---|"]
    for phase, summary in training.items():
        first, last = (_number(summary.get(key)) for key in ("first_loss", "last_loss"))
        lines.append(f"| {phase} | {summary.get('steps', '')} | {first} | {last} |")
    lines.append("")
    return lines


def _evaluation_table(scores: list[Score]) -> list[str]:
    """The Evaluation section (one row per score), or nothing without scores."""
    if not scores:
        return []
    lines = ["## Evaluation", "", "| task | metric | value | 95% interval | n |", "|---|---|---|---|---|"]
    for score in scores:
        interval = f"{score.interval[0]:.4f}-{score.interval[1]:.4f}" if score.interval else ""
        lines.append(f"| {score.task} | {score.metric} | {score.value:.4f} | {interval} | {score.n or ''} |")
    lines.append("")
    return lines


def _closing_lines(limitations: str) -> list[str]:
    return [
        "## Limitations",
        "",
        limitations or "Research code; not a medical device and not for clinical use.",
        "",
        "## Privacy",
        "",
        PRIVACY,
        "",
    ]


def _number(value) -> str:
    """A table cell: four decimals, or empty when there is no number (a run too short to log a loss)."""
    return f"{value:.4f}" if isinstance(value, int | float) else ""


def write_model_card(card: ModelCard, folder: str | Path) -> Path:
    """`folder/README.md`, written aside and renamed into place."""
    path = Path(folder) / "README.md"
    with atomic_path(path) as temporary:
        card.save(temporary)
    return path


__all__ = ["FAMILIES", "PRIVACY", "SYNTHETIC_COHORT", "USAGE", "Score", "model_card", "write_model_card"]
