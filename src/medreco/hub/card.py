"""Model cards (`README.md` with Hub metadata) for saved MedReCo models.

A card is built only from what the caller passes (training summaries, evaluation numbers, a
description of the data), never from image headers, so no identifying DICOM attribute can reach
it. `huggingface_hub.ModelCard` writes the YAML metadata the Hub reads."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

from ..atomic import atomic_path

FAMILIES = {
    "retrieval": ("AutoModel", "entity-conditioned retrieval model (vision encoder, text encoder, conditioner)"),
    "reranker": ("AutoModel", "cross-attention reranker over entity-attended visual tokens"),
    "vlm": ("AutoModelForImageTextToText", "comparative vision-language model (two studies and a question)"),
}


def model_card(
    family: str,
    training: dict | None = None,
    evaluation: list[tuple[str, str, float]] | None = None,
    data_description: str = "",
    limitations: str = "",
) -> ModelCard:
    """The card of a model of `family` ("retrieval", "reranker" or "vlm"). `training`: phase name ->
    summary (steps, first/last loss); `evaluation`: (task, metric, value) rows."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {sorted(FAMILIES)}")
    auto_class, what = FAMILIES[family]
    metadata = ModelCardData(
        library_name="transformers",
        tags=["medreco", "radiology", "medical-imaging", f"medreco-{family}"],
    )
    lines = [
        f"# MedReCo {family}",
        "",
        f"A {what}, from the `medreco` package (MedReCo: comparative reasoning in radiology).",
        "",
        "## Use",
        "",
        "```python",
        "import medreco  # registers the model types with the Auto classes",
        f"from transformers import {auto_class}",
        f'model = {auto_class}.from_pretrained("path/to/this/folder")',
        "```",
        "",
        "Without medreco installed, export the model with `medreco export` and load it with",
        "`trust_remote_code=True`.",
        "",
        "## Training data",
        "",
        data_description or "Not described.",
        "",
    ]
    if training:
        lines += ["## Training", "", "| phase | steps | first loss | last loss |", "|---|---|---|---|"]
        for name, summary in training.items():
            lines.append(
                f"| {name} | {summary.get('steps', '')} | {summary.get('first_loss', float('nan')):.4f} | "
                f"{summary.get('last_loss', float('nan')):.4f} |"
            )
        lines.append("")
    if evaluation:
        lines += ["## Evaluation", "", "| task | metric | value |", "|---|---|---|"]
        lines += [f"| {task} | {metric} | {value:.4f} |" for task, metric, value in evaluation]
        lines.append("")
    lines += [
        "## Limitations",
        "",
        limitations or "Research code; not a medical device and not for clinical use.",
        "",
    ]
    return ModelCard(f"---\n{metadata.to_yaml()}\n---\n\n" + "\n".join(lines))


def write_model_card(card: ModelCard, folder: str | Path) -> Path:
    """`folder/README.md`, written aside and renamed into place."""
    path = Path(folder) / "README.md"
    with atomic_path(path) as temporary:
        card.save(temporary)
    return path


__all__ = ["model_card", "write_model_card"]
