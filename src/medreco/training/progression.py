"""Progression training (`medreco train progression`): BioViL-T's prior-image fusion and a
per-finding progression head on a frozen stage-1 model, with TILA's inversion-aware fine-tuning.

Pairs are the mined longitudinal table's findings with a directional change (new or increased:
worsening; decreased or resolved: improving; stable), by patient-level split. The stage-1 vision
encoder and text encoder stay frozen, so every study's static tokens and every finding's text
embedding are computed once; a step runs the fusion blocks and the head only. The saved model is
the stage-1 model plus those two parts (`num_temporal_layers`, `progression_head=True` in its
config): its retrieval behaviour is unchanged, and it loads with `AutoModel` like any retrieval
model.

Losses: weighted cross-entropy (BioViL-T), or TILA's bidirectional cross-entropy (each pair also
read backwards with the inverse label); with `temporal_consistency_weight` > 0 a second phase adds
TILA's temporal consistency loss to it."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import set_seed

from ..data.mining import MinedData, ProgressionPair, progression_pairs
from ..data.reports.ontology import entity_prompts
from ..inference.encoder import RetrievalEncoder
from ..inference.progression import ProgressionPredictor, StudyTokens, encode_studies, progression_batch
from ..modeling import (
    PROGRESSION_CLASSES,
    MedReCoModel,
    bidirectional_cross_entropy,
    temporal_consistency_loss,
)
from ..processing import MedReCoRetrievalProcessor
from .config import ProgressionTrainingConfig, RecipeError
from .data import ImageStore, batch_size_rule, check_nonempty, frozen_retrieval_encoder, refuse_train_transforms
from .loop import Phase, train_phase, write_run_record

logger = logging.getLogger(__name__)

TRAINED_PREFIXES = ("vision_model.temporal.", "progression.")
NEW_PARTS = (*TRAINED_PREFIXES, "change_logit_")


def with_temporal_parts(model: MedReCoModel, num_temporal_layers: int, **config_fields) -> MedReCoModel:
    """`model` rebuilt with BioViL-T's fusion (`num_temporal_layers` blocks) and the config fields
    given (e.g. `progression_head`, the temporal loss weights), every existing weight kept. A model
    that already has fusion keeps its blocks: another count is refused."""
    existing = model.config.vision_config.num_temporal_layers
    if existing and existing != num_temporal_layers:
        raise RecipeError(
            f"the stage-1 model has {existing} prior-image fusion blocks; the recipe asks for "
            f"{num_temporal_layers} (leave num_temporal_layers unset to keep them)"
        )
    config = model.config.__class__.from_dict(model.config.to_dict())
    config.vision_config.num_temporal_layers = num_temporal_layers
    for name, value in config_fields.items():
        setattr(config, name, value)
    extended = MedReCoModel(config)
    missing, unexpected = extended.load_state_dict(model.state_dict(), strict=False)
    if unexpected or any(not name.startswith(NEW_PARTS) for name in missing):
        raise ValueError(f"the model's weights do not fit (missing {missing}, unexpected {unexpected})")
    return extended


def progression_model(stage1: MedReCoModel, num_temporal_layers: int | None = None) -> MedReCoModel:
    """The stage-1 model with BioViL-T's fusion (pretrained when stage 1 had it; None: its blocks,
    else 3) and a progression head added: every stage-1 weight kept, the head's conditioner starting
    from the retrieval conditioner, and only the fusion and the head trainable."""
    layers = num_temporal_layers or stage1.config.vision_config.num_temporal_layers or 3
    model = with_temporal_parts(stage1, layers, progression_head=True)
    model.progression.conditioner.load_state_dict(stage1.conditioner.state_dict())
    start_from_the_static_reading(model.progression)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith(TRAINED_PREFIXES))
    return model


def start_from_the_static_reading(head) -> None:
    """`combine` as `[I, 0]`: before the first step the head's conditioner (a copy of the retrieval
    conditioner) reads the static tokens exactly as stage 1 does, and what the prior adds through
    `P_diff` starts at zero and is learned, rather than a random mix of the two that the copied
    conditioner was never trained on."""
    with torch.no_grad():
        width = head.combine.out_features
        head.combine.weight.zero_()
        head.combine.weight[:, :width] = torch.eye(width, dtype=head.combine.weight.dtype)
        head.combine.bias.zero_()


class ProgressionTrainer:
    def __init__(self, config: ProgressionTrainingConfig):
        self.config = config
        refuse_train_transforms(config.data, "progression")
        set_seed(config.run.seed)
        self.encoder = frozen_retrieval_encoder(config.retrieval_model, config.data)
        self.data = MinedData(config.data.mined_dir, config.data.modalities)
        self.model = progression_model(self.encoder.model, config.num_temporal_layers)
        self._tokens: StudyTokens | None = None
        self._entities: dict[str, torch.Tensor] | None = None

    def pairs(self, split: str) -> list[ProgressionPair]:
        pairs = progression_pairs(self.data.rows("longitudinal", split), self.config.entity_levels)
        return pairs[: self.config.data.max_train_samples or None] if split == "train" else pairs

    def study_tokens(self, pairs: list[ProgressionPair]) -> StudyTokens:
        """Static tokens of every study the pairs name, encoded once by the frozen stage-1 encoder."""
        studies = {s: self.data.studies[s] for p in pairs for s in (p.prior, p.current)}
        store = ImageStore(
            self.encoder.image_processor,
            studies,
            preload=self.config.data.preload_images,
            progress=self.config.run.progress,
        )
        return encode_studies(self.encoder, studies, tensors=store, progress=self.config.run.progress)

    def entity_embeddings(self, pairs: list[ProgressionPair]) -> dict[str, torch.Tensor]:
        predictor = ProgressionPredictor(self._placed_encoder(), self.config.use_prior)
        return predictor.entity_embeddings([p.entity_id for p in pairs], entity_prompts())

    def _placed_encoder(self) -> RetrievalEncoder:
        """The encoder around the progression model (same frozen text encoder as stage 1)."""
        return RetrievalEncoder(
            self.model, self.encoder.tokenizer, self.encoder.image_processor, self.encoder.placement
        )

    def class_weights(self, pairs: list[ProgressionPair]) -> torch.Tensor | None:
        """Inverse class frequencies, normalised to mean 1 (None when `class_weighted` is off)."""
        if not self.config.class_weighted:
            return None
        counts = torch.tensor([sum(p.progression == c for p in pairs) for c in PROGRESSION_CLASSES], dtype=torch.float)
        weights = counts.sum() / counts.clamp(min=1) / len(PROGRESSION_CLASSES)
        return weights / weights.mean()

    def phase(self, name: str, pairs: list[ProgressionPair], consistency_weight: float) -> Phase:
        tokens, entities, weights = self._tokens, self._entities, self.class_weights(pairs)
        both_orders = self.config.loss == "bidirectional" or consistency_weight > 0
        use_prior = self.config.use_prior

        def collate(batch: list[ProgressionPair]) -> dict:
            return progression_batch(batch, tokens, entities, use_prior, both_orders)

        def loss(model, batch) -> torch.Tensor:
            output = model(**batch, return_loss=False)
            labels = batch["progression"].labels
            class_weights = None if weights is None else weights.to(labels.device)
            if not both_orders:
                return torch.nn.functional.cross_entropy(
                    output.progression_logits.float(), labels, weight=class_weights
                )
            value = bidirectional_cross_entropy(
                output.progression_logits, output.reversed_progression_logits, labels, class_weights
            )
            if consistency_weight:
                value = value + consistency_weight * temporal_consistency_loss(
                    output.progression_logits, output.reversed_progression_logits
                )
            return value

        optimization = self.config.optimization
        batch_size = batch_size_rule(
            self.encoder.image_processor, optimization.batch_size_2d, optimization.batch_size_3d
        )
        # batches of one modality: its studies share a token grid
        modalities = [self.data.studies[p.current].modality for p in pairs]
        return Phase(name, pairs, modalities, batch_size, collate, loss)

    def train(self, stop_after: int | None = None) -> dict:
        out = Path(self.config.run.output_dir)
        pairs = self.pairs("train")
        check_nonempty(pairs, "train progression pairs (longitudinal findings with a direction)", self.data.directory)
        counts = {c: sum(p.progression == c for p in pairs) for c in PROGRESSION_CLASSES}
        logger.info("progression: %d training pairs %s", len(pairs), counts)
        self._tokens = self.study_tokens(pairs)
        self._entities = self.entity_embeddings(pairs)
        summaries = {}
        phases = [("progression", self.config.optimization, 0.0)]
        if self.config.temporal_consistency_weight > 0:
            phases.append(("consistency", self.config.consistency, self.config.temporal_consistency_weight))
        result = None
        for name, optimization, weight in phases:
            result = train_phase(
                self.model,
                self.phase(name, pairs, weight),
                optimization,
                self.config.run,
                out / name,
                stop_after=stop_after,
            )
            self.model = result.model
            summaries[name] = result.summary
            if result.summary.get("stopped_early"):
                return summaries
        config = self.config
        processor = MedReCoRetrievalProcessor(self.encoder.image_processor, self.encoder.tokenizer)

        def companions(folder: Path) -> None:
            processor.save_pretrained(folder)
            write_run_record(folder, config, summaries, "retrieval")

        result.save_pretrained(out / "final", companions)
        return summaries


def train_progression(config: ProgressionTrainingConfig, stop_after: int | None = None) -> dict:
    return ProgressionTrainer(config).train(stop_after=stop_after)


__all__ = ["ProgressionTrainer", "progression_model", "train_progression", "with_temporal_parts"]
