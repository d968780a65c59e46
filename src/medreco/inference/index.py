"""The gallery index: an archive encoded once, entity-conditioned embeddings cached per entity,
exact and FAISS approximate search, all persisted and reloadable. Exact search reads a float16
copy of the gallery and rescores a shortlist in float32 (`ExactSearch`); the galleries of the last
few entities searched stay in memory.

Layout of an index folder:

    index.json                                 the commit point: model, per-modality study order, the
                                               token file of each modality, unreadable images
    tokens/<modality>-<rows>.safetensors       conditioning tokens (S, N, d), float16
    entities/<modality>/<rows>/<key>.safetensors   conditioned features (S, d), attention (S, N) of one entity
    faiss/<modality>/<rows>/<key>.hnsw         approximate index over those features (built on demand)

`add` encodes studies in blocks (`commit_every`): each block's token files are written under new
names, then `index.json` is replaced to name them (the one commit point), then the files it no
longer names are removed. A kill at any moment leaves the index of the last committed block, and
re-running resumes after it; an image that cannot be read is skipped, reported in `index.json`
and tried again on the next run. Derived caches sit under the token file they were computed from,
so they can never describe other rows. Only study ids, modalities and image paths are stored:
nothing identifying from the DICOM headers."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from ..atomic import atomic_path, remove_atomically, remove_stale_temporaries, write_text_atomically
from ..errors import MedicalImageError, MedReCoError
from .device import InferenceDevice
from .encoder import RetrievalEncoder

logger = logging.getLogger(__name__)
WHOLE_IMAGE = "<whole image>"


# FAISS HNSW settings (benchmarks/retrieval_scaling.py): with FAISS's default efConstruction (40)
# the graph of 1M clustered 512-d embeddings found 87% of the exact top 10 at efSearch 128 and no
# more than 93% at any efSearch; built with 100, 99% at the same 0.6 ms per query.
HNSW_NEIGHBOURS, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 32, 100, 128


# Entity galleries kept in memory for searching (float32 and float16 copies, and the HNSW graph).
SEARCHERS_IN_MEMORY = 4
_FLOAT16_UNIT = 2.0**-11  # float16 relative rounding error (round to nearest), 11-bit significand
_FLOAT32_UNIT = 2.0**-24


class ExactSearch:
    """Exact top-k inner-product search that reads a float16 copy of the gallery.

    A matrix-vector product over a large gallery is bound by memory traffic, so the scores are first
    computed over float16 rows (half the bytes, and PyTorch's reduced-precision CPU matrix-vector
    kernel accumulates in float32). A bound on the difference between those scores and the float32
    ones shortlists every row that could be among the float32 top k; the shortlist alone is rescored
    in float32. Results are those of a float32 search (up to float32 rounding); the shortlist is
    typically a few dozen rows. The bound adds: each row's measured rounding residual times the
    query norm, the query's measured rounding residual times the largest row norm, and the output
    rounding and float32 accumulation errors of the product."""

    def __init__(self, features: torch.Tensor):
        self.features = features.detach().float().contiguous()
        if not torch.isfinite(self.features).all():
            raise ValueError("the gallery features have NaN or infinite values")
        largest = float(self.features.abs().max()) if self.features.numel() else 0.0
        # float16 holds magnitudes up to 65504: an unusual gallery is searched in float32 alone
        self.coarse = self.features.half() if largest < 2.0**14 else None
        if self.coarse is not None:
            coarse = self.coarse.float()
            self.row_norm = float(coarse.norm(dim=1).max()) if len(coarse) else 0.0
            self.row_residual = float((self.features - coarse).norm(dim=1).max()) if len(coarse) else 0.0

    def __len__(self) -> int:
        return self.features.shape[0]

    def error_bound(self, query: torch.Tensor, coarse_query: torch.Tensor) -> float:
        """Largest possible |float16 score - float32 score| of any row for this query."""
        query_norm, coarse_norm = float(query.norm()), float(coarse_query.float().norm())
        product = self.row_norm * coarse_norm  # bounds |score| and the sum of |products|
        return (
            query_norm * self.row_residual
            + self.row_norm * float((query - coarse_query.float()).norm())
            + product * (_FLOAT16_UNIT + self.features.shape[1] * _FLOAT32_UNIT)
            + 2.0**-24  # float16 subnormal spacing
        )

    def search(self, query: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores and row indices of the `k` rows with the largest inner product with `query` `(d,)`."""
        query = query.detach().float().reshape(-1)
        k = min(k, len(self))
        if self.coarse is None or k == 0 or k >= len(self) or float(query.abs().max()) >= 2.0**14:
            return torch.topk(self.features @ query, k)
        coarse_query = query.half()
        scores = torch.mv(self.coarse, coarse_query)  # 1-D: the float32-accumulating kernel
        kth = float(torch.topk(scores, k).values[-1])
        shortlist = torch.nonzero(scores.float() >= kth - 2 * self.error_bound(query, coarse_query)).squeeze(1)
        exact = self.features[shortlist] @ query
        top = torch.topk(exact, k)
        return top.values, shortlist[top.indices]


class GalleryIndexError(MedReCoError, ValueError):
    """An index folder that is missing, damaged, or built with another model."""


@dataclass
class SearchHit:
    study_id: str
    score: float  # cosine similarity in [-1, 1]
    row: int = -1  # the study's row in its modality's tables


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
        try:
            self.meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"studies": {}, "images": {}}
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise GalleryIndexError(f"{meta_path}: damaged ({error}); rebuild the index") from None
        self.meta.setdefault("tokens", {})
        self.meta.setdefault("unreadable", {})
        fingerprint = self._model_fingerprint()
        if self.meta.get("model") not in (None, fingerprint):
            raise GalleryIndexError(f"{self.directory}: index was built with another retrieval model; rebuild it")
        self.meta["model"] = fingerprint
        self._searchers: OrderedDict[tuple[str, int], object] = OrderedDict()

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

    def unreadable(self) -> dict[str, str]:
        """study id -> why its image could not be read, for studies the last runs skipped."""
        return dict(self.meta["unreadable"])

    def studies_of_image(self, image: str | Path) -> list[str]:
        """The indexed studies whose image is this file or folder (a query taken from the archive)."""
        wanted = Path(image).resolve()
        return [study for study, path in self.meta["images"].items() if Path(path).resolve() == wanted]

    def require_modality(self, modality: str) -> None:
        if modality not in self.meta["studies"]:
            held = ", ".join(self.modalities()) or "nothing yet"
            raise GalleryIndexError(f"{self.directory}: no {modality} studies in this index (it holds {held})")

    def add(
        self,
        study_ids: Sequence[str],
        images: Sequence,
        modalities: Sequence[str],
        batch_size: int = 16,
        progress: bool = True,
        tensors=None,
        commit_every: int = 64,
    ) -> int:
        """Encode and add studies not yet indexed (so a rerun resumes), committing every
        `commit_every` studies; images that cannot be read are skipped and listed in
        `unreadable()`. Returns how many studies were added."""
        if commit_every < 1:
            raise ValueError(f"commit_every must be at least 1, not {commit_every}")
        remove_stale_temporaries(self.directory, recursive=True)  # what a killed writer left aside
        self._remove_unreferenced()
        known = {s for ids in self.meta["studies"].values() for s in ids}
        new = [i for i, s in enumerate(study_ids) if s not in known]
        added = 0
        with tqdm(total=len(new), desc="indexing studies", disable=not progress, leave=False) as bar:
            for start in range(0, len(new), commit_every):
                block = new[start : start + commit_every]
                prepared = self._read_block(block, study_ids, images, modalities, tensors)
                ready = [i for i in block if study_ids[i] in prepared]
                encoded = self.encoder.encode_images(
                    [images[i] for i in ready],
                    [modalities[i] for i in ready],
                    [study_ids[i] for i in ready],
                    batch_size=batch_size,
                    tensors=prepared,
                )
                image_of = {study_ids[i]: str(images[i]) for i in ready}
                for studies, modality in zip(encoded, sorted({modalities[i] for i in ready})):
                    self._append(modality, studies.study_ids, studies.tokens, image_of)
                    added += len(studies.study_ids)
                self._save_meta()  # the commit point: the block's files become the index's
                self._remove_unreferenced()
                bar.update(len(block))
        return added

    def _read_block(self, block, study_ids, images, modalities, tensors) -> dict[str, torch.Tensor]:
        """Model-ready tensors of a block's readable images, by study id (from `tensors` when
        given there); the unreadable are recorded in `meta` and left out."""
        ready = {}
        for i in block:
            study = study_ids[i]
            try:
                ready[study] = (
                    tensors[study]
                    if tensors is not None and study in tensors
                    else self.encoder.image_processor.preprocess_one(images[i], modalities[i])
                )
            except (MedicalImageError, OSError) as error:
                logger.warning("skipping study %s: %s", study, error)
                self.meta["unreadable"][study] = str(error)
                continue
            self.meta["unreadable"].pop(study, None)
        return ready

    def _append(self, modality: str, new_ids: list[str], new_tokens: torch.Tensor, image_of: dict[str, str]) -> None:
        """Write the modality's tokens with `new_ids` appended under a new name, and record them
        in `meta` (committed by the next `_save_meta`)."""
        existing = self.tokens(modality).half() if modality in self.meta["studies"] else None
        tokens = new_tokens.half() if existing is None else torch.cat([existing, new_tokens.half()])
        ids = self.study_ids(modality) + new_ids
        file = f"tokens/{modality}-{len(ids):07d}.safetensors"
        _atomic_save({"tokens": tokens}, self.directory / file)
        self.meta["studies"][modality] = ids
        self.meta["tokens"][modality] = file
        self.meta["images"].update({s: image_of[s] for s in new_ids})

    def _remove_unreferenced(self) -> None:
        """Remove what `index.json` does not name: token files and caches of superseded or
        uncommitted blocks."""
        current = {self._tokens_path(m) for m in self.modalities()}
        for path in sorted((self.directory / "tokens").glob("*.safetensors")):
            if path not in current:
                remove_atomically(path)
        for kind in ("entities", "faiss"):
            for folder in sorted((self.directory / kind).glob("[!.]*")):
                if folder.name not in self.meta["studies"]:
                    remove_atomically(folder)
                    continue
                keep = self._cache_folder(kind, folder.name)
                for entry in sorted(folder.glob("[!.]*")):
                    # versioned: only the current block's folder stays; legacy: the files themselves
                    if entry != keep and (keep != folder or entry.is_dir()):
                        remove_atomically(entry)

    def _save_meta(self) -> None:
        write_text_atomically(self.directory / "index.json", json.dumps(self.meta, indent=1))

    def _tokens_path(self, modality: str) -> Path:
        # indexes written before token files were versioned hold tokens/<modality>.safetensors
        return self.directory / self.meta["tokens"].get(modality, f"tokens/{modality}.safetensors")

    def _cache_folder(self, kind: str, modality: str) -> Path:
        """Where caches derived from the modality's current token file live."""
        versioned = modality in self.meta["tokens"]
        folder = self.directory / kind / modality
        return folder / f"{len(self.study_ids(modality)):07d}" if versioned else folder

    def tokens(self, modality: str) -> torch.Tensor:
        path = self._tokens_path(modality)
        if modality not in self.meta["studies"] or not path.exists():
            raise GalleryIndexError(f"{self.directory}: no {modality} studies in this index")
        tokens = load_file(path)["tokens"].float()
        if tokens.shape[0] != len(self.study_ids(modality)):
            raise GalleryIndexError(f"{path}: {tokens.shape[0]} token rows for {len(self.study_ids(modality))} studies")
        return tokens

    def _entity_path(self, modality: str, entity: str | None) -> Path:
        return self._cache_folder("entities", modality) / f"{entity_key(entity)}.safetensors"

    def entity_features(self, modality: str, entity: str | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Conditioned features `(S, d)` and attention `(S, N)` of every study, cached on disk."""
        path = self._entity_path(modality, entity)
        if path.exists():
            cached = load_file(path)
            return cached["features"], cached["attention"].float()
        tokens = self.tokens(modality)
        ids = torch.full((tokens.shape[0],), self.encoder.image_processor.modality_id(modality), dtype=torch.long)
        features, attention = self.encoder.condition(tokens, ids, entity)
        _atomic_save({"features": features, "attention": attention.half()}, path)
        return features, attention

    def rows(self, modality: str, entity: str | None, rows: Sequence[int]) -> dict[str, torch.Tensor]:
        """Stored tokens `(R, N, d)`, conditioned features `(R, d)` and attention `(R, N)` of a few
        studies, read from the memory-mapped files row by row rather than whole."""
        tokens_path = self._tokens_path(modality)
        entity_path = self._entity_path(modality, entity)
        if not tokens_path.exists():
            raise GalleryIndexError(f"{self.directory}: no {modality} studies in this index")
        if not entity_path.exists():
            self.entity_features(modality, entity)
        out = {}
        for path, names in ((tokens_path, ("tokens",)), (entity_path, ("features", "attention"))):
            with safe_open(path, framework="pt") as stored:
                for name in names:
                    table = stored.get_slice(name)
                    picked = [table[row : row + 1] for row in rows]
                    out[name] = torch.cat(picked).float() if picked else torch.empty(0)
        return out

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
        self.require_modality(modality)
        if not torch.isfinite(query).all():
            raise ValueError("the query feature has NaN or infinite values")
        ids = self.study_ids(modality)
        wanted = min(len(ids), top_k + len(exclude or ()))
        if approximate:
            scores, order = self._faiss(modality, entity).search(query[None].numpy().astype(np.float32), wanted)
            pairs = list(zip(order[0].tolist(), scores[0].tolist()))
        else:
            scores, order = self._exact(modality, entity).search(query, wanted)
            pairs = list(zip(order.tolist(), scores.tolist()))
        hits = [SearchHit(ids[i], float(s), i) for i, s in pairs if i >= 0 and ids[i] not in (exclude or set())]
        return hits[:top_k]

    def _in_memory(self, path: Path, build):
        """What `build` makes from the file at `path`, kept while the file is unchanged (the few most
        recently used are kept)."""
        stamp = (str(path), path.stat().st_mtime_ns) if path.exists() else None
        if stamp in self._searchers:
            self._searchers.move_to_end(stamp)
            return self._searchers[stamp]
        value = build()
        self._searchers[(str(path), path.stat().st_mtime_ns)] = value  # build wrote the file if it was missing
        while len(self._searchers) > SEARCHERS_IN_MEMORY:
            self._searchers.popitem(last=False)
        return value

    def _exact(self, modality: str, entity: str | None) -> ExactSearch:
        path = self._entity_path(modality, entity)

        def build() -> ExactSearch:
            features = self.entity_features(modality, entity)[0]
            try:
                return ExactSearch(features)
            except ValueError as error:  # a damaged cache: NaN features
                raise GalleryIndexError(f"{path}: {error}; delete the file to recompute it") from error

        return self._in_memory(path, build)

    def _faiss(self, modality: str, entity: str | None):
        import faiss

        path = self._cache_folder("faiss", modality) / f"{entity_key(entity)}.hnsw"

        def build():
            if path.exists():
                return faiss.read_index(str(path))
            features, _ = self.entity_features(modality, entity)
            index = faiss.IndexHNSWFlat(features.shape[1], HNSW_NEIGHBOURS, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
            index.hnsw.efSearch = HNSW_EF_SEARCH
            index.add(features.numpy().astype(np.float32))
            with atomic_path(path) as temporary:
                faiss.write_index(index, str(temporary))
            return index

        return self._in_memory(path, build)


def index_archive(
    model: str | Path,
    out: str | Path,
    studies: Sequence[dict],
    entities: Sequence[str] = (),
    progress: bool = True,
    commit_every: int = 64,
    placement: InferenceDevice | None = None,
) -> dict:
    """Encode `studies` (rows with `image`, `modality` and optionally `study_id`; the file name
    otherwise) with the stage-1 model saved in `model` (a folder or Hub repository) into the index at
    `out` on `placement`'s device, resuming an interrupted run (committed every `commit_every`
    studies), and precompute the whole-image features and those of `entities`. Unreadable images are
    skipped and listed under "unreadable"."""
    if not studies:
        raise GalleryIndexError("no studies to index (check the split or the manifest)")
    index = GalleryIndex(out, RetrievalEncoder.from_pretrained(model, placement))
    ids = [row.get("study_id") or Path(row["image"]).stem for row in studies]
    added = index.add(
        ids,
        [row["image"] for row in studies],
        [row["modality"] for row in studies],
        progress=progress,
        commit_every=commit_every,
    )
    if not index.modalities():
        study, reason = next(iter(index.unreadable().items()))
        raise GalleryIndexError(
            f"{out}: no image could be read ({len(index.unreadable())} unreadable, listed in index.json; "
            f"the first, {study}: {reason})"
        )
    for modality in index.modalities():
        for entity in [None, *entities]:
            index.entity_features(modality, entity)
    return {
        "added": added,
        "studies": {m: len(index.study_ids(m)) for m in index.modalities()},
        "unreadable": index.unreadable(),
    }


__all__ = ["ExactSearch", "GalleryIndex", "GalleryIndexError", "SearchHit", "entity_key", "index_archive"]
