"""Search: coarse entity-conditioned ranking over an index, the reranker on the top candidates,
one fused score, and a montage of the hits with the conditioner's attention over each image.

Fused score (on [0, 1], higher is more relevant): `(1 - w) * (cosine + 1) / 2 + w * p`, where
`p` is the reranker's probability that the pair is relevant and `w` = `fusion_weight` (0.5).
Without a reranker the fused score is the rescaled cosine alone."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..atomic import save_figure
from .encoder import RerankerScorer, RetrievalEncoder, fuse_scores
from .index import GalleryIndex

logger = logging.getLogger(__name__)


@dataclass
class RankedStudy:
    rank: int
    study_id: str
    cosine: float
    reranker_probability: float | None
    fused: float
    image: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


class Searcher:
    """`search(image, modality, entity)` against a [`GalleryIndex`], optionally reranked."""

    def __init__(self, index: GalleryIndex, reranker: RerankerScorer | None = None, fusion_weight: float = 0.5):
        self.index = index
        self.encoder: RetrievalEncoder = index.encoder
        self.reranker = reranker
        self.fusion_weight = fusion_weight

    def query_tokens(self, image, modality: str) -> torch.Tensor:
        (block,) = self.encoder.encode_images([image], [modality])
        return block.tokens[0]

    def search(
        self,
        image,
        modality: str,
        entity: str | None = None,
        top_k: int = 5,
        rerank_top: int = 20,
        approximate: bool = False,
        exclude: set[str] | None = None,
    ) -> tuple[list[RankedStudy], dict]:
        """Ranked hits and what a plot needs (query tokens, attention maps)."""
        tokens = self.query_tokens(image, modality)
        modality_id = torch.tensor([self.encoder.image_processor.modality_id(modality)])
        query_features, query_attention = self.encoder.condition(tokens[None], modality_id, entity)
        pool = max(top_k, rerank_top if self.reranker is not None else top_k)
        hits = self.index.search(query_features[0], modality, entity, pool, approximate=approximate, exclude=exclude)
        stored = self.index.rows(modality, entity, [h.row for h in hits])  # the hits' rows only
        cosine = torch.tensor([h.score for h in hits])
        probabilities = None
        if self.reranker is not None and len(hits):
            inputs = RerankerScorer.pair_inputs(
                tokens,
                query_attention[0],
                query_features[0],
                stored["tokens"],
                stored["attention"],
                stored["features"],
                self.reranker.reranker.config.top_k,
            )
            probabilities = self.reranker.score(inputs, modality_id.expand(len(hits)))
            fused = fuse_scores(cosine, probabilities, self.fusion_weight)
        else:
            fused = (cosine.clamp(-1, 1) + 1) / 2
        order = torch.argsort(fused, descending=True)[:top_k].tolist()
        ranked = [
            RankedStudy(
                rank + 1,
                hits[i].study_id,
                round(float(cosine[i]), 4),
                None if probabilities is None else round(float(probabilities[i]), 4),
                round(float(fused[i]), 4),
                self.index.meta["images"].get(hits[i].study_id),
            )
            for rank, i in enumerate(order)
        ]
        extras = {
            "query_attention": query_attention[0],
            "hit_attention": [stored["attention"][i] for i in order],
        }
        return ranked, extras

    def plot(
        self, image, modality: str, hits: list[RankedStudy], extras: dict, path: str | Path, title: str = ""
    ) -> Path:
        """The montage of a search (`plot_montage`): the query and its hits, each with its attention heat-map."""
        processor = self.encoder.image_processor
        return plot_montage(
            processor.preprocess_one(image, modality),
            extras["query_attention"],
            hits,
            [processor.preprocess_one(hit.image, modality) for hit in hits],
            extras["hit_attention"],
            self.encoder.model.config.vision_config.patch_size,
            path,
            title=title,
        )


def attention_map(attention: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """Token attention `(N,)` (or `(D'*N,)` from all depth tokens) as an in-plane map `(h, w)`."""
    height, width = grid
    per_slice = height * width
    return attention.reshape(-1, per_slice).sum(0).reshape(height, width)


def plot_montage(
    query_image: torch.Tensor,
    query_attention: torch.Tensor,
    hits: list[RankedStudy],
    hit_images: list[torch.Tensor],
    hit_attention: list[torch.Tensor],
    patch_size: int,
    path: str | Path,
    title: str = "",
) -> Path:
    """Query and hits side by side (middle slice of volumes), each with its attention heat-map."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("query", query_image, query_attention)] + [
        (f"#{h.rank} {h.study_id}\nfused {h.fused:.2f}", image, att)
        for h, image, att in zip(hits, hit_images, hit_attention)
    ]
    figure, axes = plt.subplots(1, len(panels), figsize=(2.6 * len(panels), 3.0), squeeze=False)
    for axis, (label, image, att) in zip(axes[0], panels):
        plane = image[0, image.shape[1] // 2].numpy()
        grid = (plane.shape[0] // patch_size, plane.shape[1] // patch_size)
        heat = torch.nn.functional.interpolate(
            attention_map(att, grid)[None, None], size=plane.shape, mode="bilinear", align_corners=False
        )[0, 0]
        axis.imshow(plane, cmap="gray")
        axis.imshow(heat.numpy(), cmap="inferno", alpha=0.45)
        axis.set_title(label, fontsize=8)
        axis.axis("off")
    if title:
        figure.suptitle(title, fontsize=10)
    return save_figure(figure, path)


__all__ = ["RankedStudy", "Searcher", "attention_map", "plot_montage"]
