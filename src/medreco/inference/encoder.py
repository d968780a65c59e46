"""Encoding studies for retrieval: visual tokens once per study, entity-conditioned features per entity.

The expensive part (the MoE-ViT over a volume) runs once per study; conditioning on an entity is a
few cross-attention layers over the stored tokens, so adding an entity to an indexed archive never
re-reads an image. The same code serves the gallery index, search, reranker training and evaluation."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..hub.download import model_folder
from ..modeling import MedReCoModel, MedReCoReranker, select_top_tokens
from ..processing import MedReCoImageProcessor, MedReCoRetrievalProcessor
from .device import InferenceDevice

logger = logging.getLogger(__name__)


@dataclass
class EncodedStudies:
    """Visual tokens `(S, N, d)` of studies sharing a token count (one modality family), with ids."""

    study_ids: list[str]
    tokens: torch.Tensor
    modality_ids: torch.Tensor


class RetrievalEncoder:
    """A trained retrieval model with its tokenizer and image processor (a stage-1 output folder
    or Hub repository), on `placement`'s device (float32 weights, its precision under autocast)."""

    def __init__(
        self,
        model: MedReCoModel,
        tokenizer,
        image_processor: MedReCoImageProcessor,
        placement: InferenceDevice | None = None,
    ):
        self.placement = placement or InferenceDevice()
        self.model = self.placement.place(model)
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self._entity_cache: dict[str, torch.Tensor] = {}

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | Path, placement: InferenceDevice | None = None, **processor_kwargs
    ) -> RetrievalEncoder:
        folder = model_folder(name_or_path)
        if not (folder / "config.json").exists():
            raise FileNotFoundError(f"{folder}: not a saved retrieval model (no config.json)")
        model = MedReCoModel.from_pretrained(folder)
        processor = MedReCoRetrievalProcessor.from_pretrained(folder, **processor_kwargs)  # or from its config
        return cls(model, processor.tokenizer, processor.image_processor, placement)

    @property
    def device(self) -> torch.device:
        return self.model.logit_scale.device

    @torch.no_grad()
    def encode_pixels(self, pixel_values: torch.Tensor, modality_ids: torch.Tensor) -> torch.Tensor:
        """Conditioning tokens `(B, N, d)` of a batch of model-ready images."""
        with self.placement.autocast():
            output = self.model.get_image_tokens(pixel_values.to(self.device), modality_ids.to(self.device))
            tokens = self.model.conditioning_tokens(output)
        return tokens.float().cpu()

    def encode_images(
        self,
        images: Sequence,
        modalities: Sequence[str],
        study_ids: Sequence[str] | None = None,
        batch_size: int = 16,
        progress: bool = False,
        tensors: Mapping[str, torch.Tensor] | None = None,
    ) -> list[EncodedStudies]:
        """Tokens of every image, grouped by modality (images of one modality share a shape).
        `tensors` may hold already preprocessed `(1, D, H, W)` tensors by study id (e.g. an ImageStore)."""
        study_ids = list(study_ids) if study_ids is not None else [str(i) for i in range(len(images))]
        groups: dict[str, list[int]] = defaultdict(list)
        for index, modality in enumerate(modalities):
            groups[modality].append(index)
        encoded = []
        bar = tqdm(total=len(images), desc="encoding studies", disable=not progress, leave=False)
        for modality, indices in sorted(groups.items()):
            chunks = []
            for start in range(0, len(indices), batch_size):
                chunk = indices[start : start + batch_size]
                pixels = torch.stack(
                    [
                        tensors[study_ids[i]]
                        if tensors is not None and study_ids[i] in tensors
                        else self.image_processor.preprocess_one(images[i], modality)
                        for i in chunk
                    ]
                ).float()
                ids = torch.full((len(chunk),), self.image_processor.modality_id(modality), dtype=torch.long)
                chunks.append(self.encode_pixels(pixels, ids))
                bar.update(len(chunk))
            encoded.append(
                EncodedStudies(
                    [study_ids[i] for i in indices],
                    torch.cat(chunks),
                    torch.full((len(indices),), self.image_processor.modality_id(modality), dtype=torch.long),
                )
            )
        bar.close()
        return encoded

    @torch.no_grad()
    def entity_embedding(self, entity: str | None) -> torch.Tensor | None:
        """The text embedding `(1, d)` of an entity (cached), or None for whole-image retrieval."""
        if entity is None or not str(entity).strip():
            return None
        if entity not in self._entity_cache:
            with self.placement.autocast():
                embedding = self.model.encode_entity_texts([entity], self.tokenizer)
            self._entity_cache[entity] = embedding.float().cpu()
        return self._entity_cache[entity]

    @torch.no_grad()
    def embed_texts(self, texts: Sequence[str], batch_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
        """Free texts (reports, sentences) as `(T, d)` shared-space embeddings and as their text
        backbone's pooled outputs, both L2-normalised: what the image side is compared with, and
        what the text backbone alone tells apart."""
        model, shared, pooled = self.model, [], []
        for start in range(0, len(texts), batch_size):
            batch = self.tokenizer(
                list(texts[start : start + batch_size]), padding=True, truncation=True, return_tensors="pt"
            )
            ids, mask = batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device)
            with self.placement.autocast():
                backbone = model.text_encoder.pool(ids, mask)
                shared.append(model.text_encoder.project(backbone).float().cpu())
            pooled.append(torch.nn.functional.normalize(backbone.float().cpu(), dim=-1))
        return torch.cat(shared), torch.cat(pooled)

    @torch.no_grad()
    def condition(
        self, tokens: torch.Tensor, modality_ids: torch.Tensor, entity: str | None, batch_size: int = 256
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Entity-conditioned features `(S, d)` and attention over tokens `(S, N)` of stored tokens."""
        embedding = self.entity_embedding(entity)
        features, attention = [], []
        for start in range(0, tokens.shape[0], batch_size):
            chunk = tokens[start : start + batch_size].to(self.device)
            ids = modality_ids[start : start + batch_size].to(self.device)
            entity_rows = None if embedding is None else embedding.to(self.device).expand(chunk.shape[0], -1)
            with self.placement.autocast():
                output = self.model.condition(chunk, ids, entity_rows)
            features.append(output.features.float().cpu())
            attention.append(output.attention.float().cpu())
        return torch.cat(features), torch.cat(attention)


class RerankerScorer:
    """Scores (query, candidate) pairs with the reranker from conditioned features and top tokens."""

    def __init__(self, reranker: MedReCoReranker, placement: InferenceDevice | None = None):
        self.placement = placement or InferenceDevice()
        self.reranker = self.placement.place(reranker)

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, placement: InferenceDevice | None = None) -> RerankerScorer:
        return cls(MedReCoReranker.from_pretrained(model_folder(name_or_path)), placement)

    @staticmethod
    def pair_inputs(
        query_tokens: torch.Tensor,
        query_attention: torch.Tensor,
        query_feature: torch.Tensor,
        candidate_tokens: torch.Tensor,
        candidate_attention: torch.Tensor,
        candidate_features: torch.Tensor,
        top_k: int,
    ) -> dict[str, torch.Tensor]:
        """Reranker inputs for one query `(N, d)` against C candidates `(C, N, d)`."""
        count = candidate_tokens.shape[0]
        query_top = select_top_tokens(query_tokens[None], query_attention[None], top_k)
        return {
            "query_tokens": query_top.expand(count, -1, -1),
            "query_features": query_feature[None].expand(count, -1),
            "candidate_tokens": select_top_tokens(candidate_tokens, candidate_attention, top_k),
            "candidate_features": candidate_features,
        }

    @torch.no_grad()
    def score(self, inputs: dict[str, torch.Tensor], modality_ids: torch.Tensor) -> torch.Tensor:
        """Relevance probabilities `(C,)` in [0, 1]."""
        device = self.reranker.classifier.weight.device
        with self.placement.autocast():
            output = self.reranker(**{k: v.to(device) for k, v in inputs.items()}, modality_ids=modality_ids.to(device))
        return output.probabilities.float().cpu()


def fuse_scores(similarity: torch.Tensor, probability: torch.Tensor, weight: float = 0.5) -> torch.Tensor:
    """The fused score on [0, 1]: (1 - weight) * (cosine + 1) / 2 + weight * reranker probability."""
    return (1 - weight) * (similarity.clamp(-1, 1) + 1) / 2 + weight * probability


__all__ = ["EncodedStudies", "RerankerScorer", "RetrievalEncoder", "fuse_scores"]
