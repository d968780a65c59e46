"""Reading a finding's interval change between a prior and a current study with a progression
model (a retrieval model saved with BioViL-T's prior-image fusion and a progression head), or
zero-shot with a temporally pretrained retrieval model: the prior-fused feature conditioned on the
finding against text prompts of each class (`ZeroShotProgressionPredictor`); or the patient's overall
trend with TAMM's trend classifier (`TrendPredictor`).

Studies are encoded once by the frozen static encoder; each pair is then read forwards (prior ->
current) and backwards (the two studies swapped), which TILA's protocols and inversion-aware
scoring need."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..data.mining import ProgressionPair
from ..data.mining.mined import Study
from ..data.reports.change import progression_prompts
from ..data.reports.ontology import Ontology
from ..hub.download import model_folder
from ..modeling import PROGRESSION_CLASSES, ProgressionBatch
from .device import InferenceDevice
from .encoder import RetrievalEncoder


@dataclass
class StudyTokens:
    """Static tokens `(N, d)` of each study by id, with the expert id of its modality."""

    tokens: dict[str, torch.Tensor]
    modality_ids: dict[str, int]


def encode_studies(
    encoder: RetrievalEncoder,
    studies: Mapping[str, Study],
    tensors: Mapping[str, torch.Tensor] | None = None,
    progress: bool = False,
) -> StudyTokens:
    """Every study's static tokens, from `tensors` (preprocessed, by id) or its image file."""
    ids = sorted(studies)
    encoded = encoder.encode_images(
        [studies[s].image for s in ids], [studies[s].modality for s in ids], ids, progress=progress, tensors=tensors
    )
    tokens, modality_ids = {}, {}
    for group in encoded:
        for index, study_id in enumerate(group.study_ids):
            tokens[study_id] = group.tokens[index]
            modality_ids[study_id] = int(group.modality_ids[index])
    return StudyTokens(tokens, modality_ids)


def progression_batch(
    pairs: Sequence[ProgressionPair],
    studies: StudyTokens,
    entity_embeddings: Mapping[str, torch.Tensor],
    use_prior: bool = True,
    both_orders: bool = False,
) -> dict:
    """Model inputs for `pairs`: `modality_ids` and a `ProgressionBatch` with labels (indices into
    `PROGRESSION_CLASSES`). `use_prior=False` gives every pair the missing-prior token (the static
    baseline); `entity_embeddings` maps entity ids to `(d,)` text embeddings."""
    return {
        "modality_ids": torch.tensor([studies.modality_ids[p.current] for p in pairs]),
        "progression": ProgressionBatch(
            current_tokens=torch.stack([studies.tokens[p.current] for p in pairs]),
            prior_tokens=torch.stack([studies.tokens[p.prior] for p in pairs]),
            entity_embeddings=torch.stack([entity_embeddings[p.entity_id] for p in pairs]),
            has_prior=torch.full((len(pairs),), use_prior),
            labels=torch.tensor([PROGRESSION_CLASSES.index(p.progression) for p in pairs]),
            both_orders=both_orders,
        ),
    }


class ProgressionPredictor:
    """Forward and reversed progression logits of mined pairs from a saved progression model."""

    def __init__(self, encoder: RetrievalEncoder, use_prior: bool = True):
        if encoder.model.progression is None:
            raise ValueError("this retrieval model has no progression head (train one: `medreco train progression`)")
        self.encoder = encoder
        self.use_prior = use_prior

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | Path, placement: InferenceDevice | None = None, use_prior: bool | None = None
    ) -> ProgressionPredictor:
        """A saved progression model; `use_prior` defaults to how it was trained (the
        `training_config.json` beside it: a static baseline keeps reading without priors)."""
        encoder = RetrievalEncoder.from_pretrained(name_or_path, placement)
        if encoder.model.progression is None:
            raise ValueError(
                f"{name_or_path}: this retrieval model has no progression head (train one: `medreco train progression`)"
            )
        if use_prior is None:
            record = model_folder(name_or_path) / "training_config.json"
            use_prior = json.loads(record.read_text()).get("use_prior", True) if record.is_file() else True
        return cls(encoder, bool(use_prior))

    def entity_embeddings(self, entity_ids: Sequence[str], prompts: Mapping[str, str]) -> dict[str, torch.Tensor]:
        """Text embeddings `(d,)` of findings by id (their prompt, else the id itself)."""
        return {e: self.encoder.entity_embedding(prompts.get(e, e))[0] for e in sorted(set(entity_ids))}

    @torch.no_grad()
    def logits(
        self,
        pairs: Sequence[ProgressionPair],
        studies: StudyTokens,
        entity_embeddings: Mapping[str, torch.Tensor],
        batch_size: int = 128,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(forward, reversed)` logits `(P, 3)`: each pair read prior -> current, then swapped."""
        model, placement = self.encoder.model.eval(), self.encoder.placement
        forward, backward = [], []
        for start in range(0, len(pairs), batch_size):
            batch = progression_batch(
                pairs[start : start + batch_size], studies, entity_embeddings, self.use_prior, both_orders=True
            )
            device = self.encoder.device
            with placement.autocast():
                output = model(
                    modality_ids=batch["modality_ids"].to(device),
                    progression=batch["progression"].to(device),
                    return_loss=False,
                )
            forward.append(output.progression_logits.float().cpu())
            backward.append(output.reversed_progression_logits.float().cpu())
        if not forward:
            return torch.zeros(0, 3), torch.zeros(0, 3)
        return torch.cat(forward), torch.cat(backward)


@dataclass
class FindingPrompts:
    """One finding's text side for zero-shot reading: `query` `(d,)` conditions the fused tokens
    on the finding; `classes` `(3, d)` holds each progression class's prompt embedding (the mean
    of its prompts' embeddings, L2-normalised, as BioViL-T marginalises several prompts)."""

    query: torch.Tensor
    classes: torch.Tensor


class ZeroShotProgressionPredictor:
    """Progression without a trained head (BioViL-T's and TILA's zero-shot protocol): a retrieval
    model pretrained with prior-image fusion scores each pair's fused feature, conditioned on the
    finding, against the prompts of `PROGRESSION_PROMPT_TEMPLATES`; the logits are the cosine
    similarities at the model's temperature. Same interface as `ProgressionPredictor`."""

    def __init__(self, encoder: RetrievalEncoder, source: str | Path = "this retrieval model"):
        if encoder.model.vision_model.temporal is None:
            raise ValueError(
                f"{source}: no prior-image fusion; zero-shot progression needs stage 1 trained with "
                "num_temporal_layers and temporal_alignment_weight"
            )
        self.encoder = encoder

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | Path, placement: InferenceDevice | None = None
    ) -> ZeroShotProgressionPredictor:
        return cls(RetrievalEncoder.from_pretrained(name_or_path, placement), name_or_path)

    def entity_embeddings(self, entity_ids: Sequence[str], prompts: Mapping[str, str]) -> dict[str, FindingPrompts]:
        """Each finding's query (its prompt, else the id) and class prompt embeddings."""
        terms = {entity.id: entity.term for entity in Ontology.load().entities()}
        found = {}
        for entity in sorted(set(entity_ids)):
            term = terms.get(entity, prompts.get(entity, entity)).lower()
            classes = progression_prompts(term)
            embedded = [self._embed(classes[label]).mean(0) for label in PROGRESSION_CLASSES]
            found[entity] = FindingPrompts(
                self.encoder.entity_embedding(prompts.get(entity, entity))[0],
                torch.nn.functional.normalize(torch.stack(embedded), dim=-1),
            )
        return found

    @torch.no_grad()
    def _embed(self, texts: list[str]) -> torch.Tensor:
        with self.encoder.placement.autocast():
            return self.encoder.model.encode_entity_texts(texts, self.encoder.tokenizer).float().cpu()

    @torch.no_grad()
    def logits(
        self,
        pairs: Sequence[ProgressionPair],
        studies: StudyTokens,
        entity_embeddings: Mapping[str, FindingPrompts],
        batch_size: int = 128,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(forward, reversed)` logits `(P, 3)`: each pair read prior -> current, then swapped."""
        model, placement, device = self.encoder.model.eval(), self.encoder.placement, self.encoder.device
        forward, backward = [], []
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start : start + batch_size]
            ids = torch.tensor([studies.modality_ids[p.current] for p in chunk], device=device)
            current = torch.stack([studies.tokens[p.current] for p in chunk]).to(device)
            prior = torch.stack([studies.tokens[p.prior] for p in chunk]).to(device)
            queries = torch.stack([entity_embeddings[p.entity_id].query for p in chunk]).to(device)
            classes = torch.stack([entity_embeddings[p.entity_id].classes for p in chunk]).to(device)
            scale = model.logit_scale.exp().float()
            for first, second, out in ((current, prior, forward), (prior, current, backward)):
                with placement.autocast():
                    fused = model.temporal_tokens(first, second, ids)
                    features = model.condition(fused, ids, queries).features
                out.append((scale * torch.einsum("bd,bkd->bk", features.float(), classes.float())).cpu())
        if not forward:
            return torch.zeros(0, 3), torch.zeros(0, 3)
        return torch.cat(forward), torch.cat(backward)


class TrendPredictor:
    """TAMM's trend classifier of a stage-1 model trained with `trend_weight`: a pair's overall
    trend (improving / stable / worsening) from the difference of the two studies' whole-image
    features, current minus prior; read backwards, the difference is negated. Pairs are
    `ProgressionPair`s whose `entity_id` is ignored (the trend is the patient's, not a finding's)."""

    def __init__(self, encoder: RetrievalEncoder, source: str | Path = "this retrieval model"):
        if getattr(encoder.model, "trend_head", None) is None:
            raise ValueError(
                f"{source}: this retrieval model has no trend classifier (train stage 1 with trend_weight)"
            )
        self.encoder = encoder

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, placement: InferenceDevice | None = None) -> TrendPredictor:
        return cls(RetrievalEncoder.from_pretrained(name_or_path, placement), name_or_path)

    def entity_embeddings(self, entity_ids: Sequence[str], prompts: Mapping[str, str]) -> dict:
        return {}  # no finding conditions a trend

    @torch.no_grad()
    def logits(
        self, pairs: Sequence[ProgressionPair], studies: StudyTokens, entity_embeddings=None, batch_size: int = 256
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(forward, reversed)` logits `(P, 3)` of each pair's trend."""
        head = self.encoder.model.eval().trend_head
        forward, backward = [], []
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start : start + batch_size]
            ids = torch.tensor([studies.modality_ids[p.current] for p in chunk])
            current, _ = self.encoder.condition(torch.stack([studies.tokens[p.current] for p in chunk]), ids, None)
            prior, _ = self.encoder.condition(torch.stack([studies.tokens[p.prior] for p in chunk]), ids, None)
            change = (current - prior).to(self.encoder.device)
            forward.append(head(change.to(head.weight.dtype)).float().cpu())
            backward.append(head((-change).to(head.weight.dtype)).float().cpu())
        if not forward:
            return torch.zeros(0, 3), torch.zeros(0, 3)
        return torch.cat(forward), torch.cat(backward)


__all__ = [
    "FindingPrompts",
    "ProgressionPredictor",
    "TrendPredictor",
    "StudyTokens",
    "ZeroShotProgressionPredictor",
    "encode_studies",
    "progression_batch",
]
