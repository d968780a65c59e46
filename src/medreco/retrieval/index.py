"""The gallery index: an archive encoded once, entity-conditioned embeddings cached per entity,
exact and FAISS approximate search, all persisted and reloadable.

Layout of an index folder:

    index.json                      model it was built with, per-modality study order
    tokens/<modality>.safetensors   conditioning tokens (S, N, d), float16
    entities/<modality>/<key>.safetensors   conditioned features (S, d) and attention (S, N) of one entity
    faiss/<modality>/<key>.hnsw     approximate index over those features (built on demand)

Every file is written next to its target and renamed into place, so an interrupted build or
update never leaves a corrupt index: adding studies rewrites the modality's tokens atomically
and drops that modality's (now stale) entity caches. Only study ids, modalities and image
paths are stored: nothing identifying from the DICOM headers."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ..atomic import atomic_path, write_text_atomically
from ..errors import MedReCoError
from .encoder import RetrievalEncoder

logger = logging.getLogger(__name__)
WHOLE_IMAGE = "<whole image>"


# FAISS HNSW settings (benchmarks/retrieval_scaling.py): with FAISS's default efConstruction (40)
# the graph of 1M clustered 512-d embeddings found 87% of the exact top 10 at efSearch 128 and no
# more than 93% at any efSearch; built with 100, 99% at the same 0.6 ms per query.
HNSW_NEIGHBOURS, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 32, 100, 128


class GalleryIndexError(MedReCoError, ValueError):
    """An index folder that is missing, damaged, or built with another model."""


@dataclass
class SearchHit:
    study_id: str
    score: float  # cosine similarity in [-1, 1]


def entity_key(entity: str | None) -> str:
    """A file-safe key of an entity text (None: whole image)."""
    text = WHOLE_IMAGE if entity is None else entity.strip().lower()
    slug = "".join(c if c.isalnum() else "-" for c in text)[:40].strip("-") or "entity"
    return f"{slug}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def _atomic_save(tensors: dict[str, torch.Tensor], path: Path) -> None:
    with atomic_path(path) as temporary:
        save_file({k: v.contiguous() for k, v in tensors.items()}, temporary)


class GalleryIndex:
    """Encoded studies of an archive, searchable under any entity. See the module docstring."""

    def __init__(self, directory: str | Path, encoder: RetrievalEncoder):
        self.directory = Path(directory)
        self.encoder = encoder
        meta_path = self.directory / "index.json"
        self.meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"studies": {}, "images": {}}
        fingerprint = self._model_fingerprint()
        if self.meta.get("model") not in (None, fingerprint):
            raise GalleryIndexError(f"{self.directory}: index was built with another retrieval model; rebuild it")
        self.meta["model"] = fingerprint

    def _model_fingerprint(self) -> str:
        digest = hashlib.sha256()
        for name, tensor in sorted(self.encoder.model.state_dict().items())[:8]:
            digest.update(name.encode())
            digest.update(tensor.detach().float().cpu().numpy().tobytes()[:4096])
        return digest.hexdigest()[:16]

    # ---- building
    def study_ids(self, modality: str) -> list[str]:
        return list(self.meta["studies"].get(modality, []))

    def modalities(self) -> list[str]:
        return sorted(self.meta["studies"])

    def add(
        self,
        study_ids: Sequence[str],
        images: Sequence,
        modalities: Sequence[str],
        batch_size: int = 16,
        progress: bool = True,
        tensors=None,
    ) -> int:
        """Encode and add studies not yet indexed (so a rerun resumes); returns how many were added."""
        known = {s for ids in self.meta["studies"].values() for s in ids}
        new = [i for i, s in enumerate(study_ids) if s not in known]
        if not new:
            return 0
        encoded = self.encoder.encode_images(
            [images[i] for i in new],
            [modalities[i] for i in new],
            [study_ids[i] for i in new],
            batch_size=batch_size,
            progress=progress,
            tensors=tensors,
        )
        image_of = {study_ids[i]: str(images[i]) for i in new}
        for block, modality in zip(encoded, sorted({modalities[i] for i in new})):
            path = self.directory / "tokens" / f"{modality}.safetensors"
            existing = load_file(path)["tokens"] if path.exists() else None
            tokens = block.tokens.half() if existing is None else torch.cat([existing, block.tokens.half()])
            _atomic_save({"tokens": tokens}, path)
            self.meta["studies"][modality] = self.study_ids(modality) + block.study_ids
            self.meta["images"].update({study: image_of[study] for study in block.study_ids})
            for folder in (self.directory / "entities" / modality, self.directory / "faiss" / modality):
                for stale in folder.glob("*"):
                    if not stale.name.startswith("."):  # leave another writer's temporary file alone
                        stale.unlink()
            self._save_meta()  # after the tokens: a crash in between leaves the old, consistent state
        return len(new)

    def _save_meta(self) -> None:
        write_text_atomically(self.directory / "index.json", json.dumps(self.meta, indent=1))

    def tokens(self, modality: str) -> torch.Tensor:
        path = self.directory / "tokens" / f"{modality}.safetensors"
        if not path.exists():
            raise GalleryIndexError(f"{self.directory}: no {modality} studies in this index")
        tokens = load_file(path)["tokens"].float()
        if tokens.shape[0] != len(self.study_ids(modality)):
            raise GalleryIndexError(f"{path}: {tokens.shape[0]} token rows for {len(self.study_ids(modality))} studies")
        return tokens

    def entity_features(self, modality: str, entity: str | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Conditioned features `(S, d)` and attention `(S, N)` of every study, cached on disk."""
        path = self.directory / "entities" / modality / f"{entity_key(entity)}.safetensors"
        if path.exists():
            cached = load_file(path)
            return cached["features"], cached["attention"].float()
        tokens = self.tokens(modality)
        ids = torch.full((tokens.shape[0],), self.encoder.image_processor.modality_id(modality), dtype=torch.long)
        features, attention = self.encoder.condition(tokens, ids, entity)
        _atomic_save({"features": features, "attention": attention.half()}, path)
        return features, attention

    # ---- searching
    def search(
        self,
        query: torch.Tensor,
        modality: str,
        entity: str | None,
        top_k: int = 10,
        approximate: bool = False,
        exclude: set[str] | None = None,
    ) -> list[SearchHit]:
        """The `top_k` studies most similar to a query feature `(d,)` under `entity`."""
        features, _ = self.entity_features(modality, entity)
        ids = self.study_ids(modality)
        wanted = min(len(ids), top_k + len(exclude or ()))
        if approximate:
            scores, order = self._faiss(modality, entity, features).search(
                query[None].numpy().astype(np.float32), wanted
            )
            pairs = list(zip(order[0].tolist(), scores[0].tolist()))
        else:
            scores = features @ query
            top = torch.topk(scores, wanted)
            pairs = list(zip(top.indices.tolist(), top.values.tolist()))
        hits = [SearchHit(ids[i], float(s)) for i, s in pairs if i >= 0 and ids[i] not in (exclude or set())]
        return hits[:top_k]

    def _faiss(self, modality: str, entity: str | None, features: torch.Tensor):
        import faiss

        path = self.directory / "faiss" / modality / f"{entity_key(entity)}.hnsw"
        if path.exists():
            return faiss.read_index(str(path))
        index = faiss.IndexHNSWFlat(features.shape[1], HNSW_NEIGHBOURS, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        index.hnsw.efSearch = HNSW_EF_SEARCH
        index.add(features.numpy().astype(np.float32))
        with atomic_path(path) as temporary:
            faiss.write_index(index, str(temporary))
        return index


__all__ = ["GalleryIndex", "GalleryIndexError", "SearchHit", "entity_key"]
