"""Retrieval evaluation under entity-level relevance (the paper's Tables S11-S16 protocol).

For each test query (a study and an entity its report mentions) the gallery is the other
patients' studies of the same modality and split; relevant studies are those whose report agrees
on that entity. Systems compared on the same queries:

- `entity`: entity-conditioned similarity (the MedReCo model);
- `entity+rerank`: the top `rerank_top` of `entity` reordered by the fused score (reranker);
- `holistic`: the same model with no entity (whole-image similarity);
- any extra system given as a scoring function (e.g. a CLIP-style model's embeddings).

Reported per modality and entity level: Recall@1/3/5 with 95% Wilson intervals, NDCG@5, and
McNemar tests on Recall@1 between systems."""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from ..data.mining import MinedData
from ..data.reports.ontology import entity_prompts
from ..inference.device import InferenceDevice
from ..inference.encoder import EncodedStudies, RerankerScorer, RetrievalEncoder, fuse_scores
from .metrics import clustered_mean, clustered_paired_test, mcnemar_test, ndcg_at_k, recall_at_k, wilson_interval

logger = logging.getLogger(__name__)
LEVEL_NAMES = {"anatomy": "anatomy", "abnormal": "abnormality", "disease": "disease"}
KS = (1, 3, 5)

ExternalSystem = Callable[[str, list[str]], list[float]]  # (query study, gallery studies) -> scores


class ClipBaseline:
    """A CLIP-style model's whole-image similarity as an extra retrieval system (an
    `ExternalSystem`): any Hugging Face model with `get_image_features` and an image processor
    (CLIP, SigLIP, BiomedCLIP exports, ...). Each study is read with our readers, shown to the
    model as an 8-bit RGB picture in its own display window (the middle slice of a volume, since
    such models read 2D pictures), embedded once and compared by cosine similarity."""

    def __init__(
        self, model_name_or_path: str, studies: dict, batch_size: int = 32, placement: InferenceDevice | None = None
    ):
        from transformers import AutoImageProcessor, AutoModel

        self.name = model_name_or_path
        self.placement = placement or InferenceDevice()
        self.model = self.placement.place(AutoModel.from_pretrained(model_name_or_path))
        if not hasattr(self.model, "get_image_features"):
            raise ValueError(f"{model_name_or_path}: not a CLIP-style model (it has no get_image_features)")
        self.image_processor = AutoImageProcessor.from_pretrained(model_name_or_path)
        self.studies, self.batch_size = studies, batch_size
        self.features: dict[str, torch.Tensor] = {}

    @staticmethod
    def picture(path: str) -> np.ndarray:
        """(H, W, 3) uint8: the image's middle slice in its display window (else its 0.5-99.5
        percentile range)."""
        from ..processing import load_image

        image = load_image(path)
        plane = image.array[image.array.shape[0] // 2]
        low, high = image.display_window or tuple(np.percentile(plane, [0.5, 99.5]))
        scaled = np.clip((plane - low) / max(high - low, 1e-6), 0.0, 1.0)
        return np.repeat((scaled * 255).round().astype(np.uint8)[..., None], 3, axis=-1)

    @torch.no_grad()
    def embed(self, study_ids: list[str]) -> None:
        missing = [s for s in dict.fromkeys(study_ids) if s not in self.features]
        for start in range(0, len(missing), self.batch_size):
            batch = missing[start : start + self.batch_size]
            pictures = [self.picture(self.studies[s].image) for s in batch]
            inputs = self.image_processor(images=pictures, return_tensors="pt").to(self.placement.torch_device)
            with self.placement.autocast():
                output = self.model.get_image_features(**inputs)
            features = output if isinstance(output, torch.Tensor) else output.pooler_output
            normalized = torch.nn.functional.normalize(features.float(), dim=-1).cpu()
            for study, feature in zip(batch, normalized, strict=True):
                self.features[study] = feature

    def __call__(self, query: str, gallery: list[str]) -> list[float]:
        self.embed([query, *gallery])
        return (torch.stack([self.features[s] for s in gallery]) @ self.features[query]).tolist()


def entity_level(entity_id: str) -> str:
    """ "cxr/abnormal/pleural-effusion@pleura" -> "abnormality"."""
    parts = entity_id.split("/")
    return LEVEL_NAMES.get(parts[1], parts[1]) if len(parts) > 2 else "unknown"


def evaluate_retrieval(
    encoder: RetrievalEncoder,
    data: MinedData,
    split: str = "test",
    reranker: RerankerScorer | None = None,
    rerank_top: int = 10,
    fusion_weight: float = 0.5,
    extra_systems: dict[str, ExternalSystem] | None = None,
    tensors: dict[str, torch.Tensor] | None = None,
    progress: bool = True,
) -> dict:
    """Rank every test query's gallery with each system; returns `{"queries": [...], "summary": {...}}`."""
    rows = data.rows("retrieval", split)
    if not rows:
        raise ValueError(f"{data.directory}: no retrieval queries in split {split!r}")
    prompts = entity_prompts()
    needed = sorted({r["query"] for r in rows} | {s for r in rows for s in r["gallery"] if s in data.studies})
    encoded = encoder.encode_images(
        [data.studies[s].image for s in needed],
        [data.studies[s].modality for s in needed],
        needed,
        progress=progress,
        tensors=tensors,
    )
    position = {s: (g, i) for g, group in enumerate(encoded) for i, s in enumerate(group.study_ids)}
    conditioned: dict[tuple[int, str | None], tuple[torch.Tensor, torch.Tensor]] = {}

    def features(group: int, entity: str | None):
        if (group, entity) not in conditioned:
            block = encoded[group]
            conditioned[(group, entity)] = encoder.condition(block.tokens, block.modality_ids, entity)
        return conditioned[(group, entity)]

    results = []
    for row in tqdm(rows, desc=f"retrieval ({split})", disable=not progress, leave=False):
        group, query_index = position[row["query"]]
        gallery = [s for s in row["gallery"] if s in position]
        relevant = set(row["relevant"]) & set(gallery)
        if not relevant:
            continue
        gallery_index = torch.tensor([position[s][1] for s in gallery])
        prompt = prompts.get(row["entity_id"], row["entity_id"])
        entity_features, entity_attention = features(group, prompt)
        whole_features, _ = features(group, None)
        entity_scores = entity_features[gallery_index] @ entity_features[query_index]
        rankings = {
            "entity": _rank(gallery, entity_scores),
            "holistic": _rank(gallery, whole_features[gallery_index] @ whole_features[query_index]),
        }
        if reranker is not None:
            order = _rerank(
                reranker,
                encoded[group],
                (entity_features, entity_attention),
                query_index,
                gallery_index,
                entity_scores,
                rerank_top,
                fusion_weight,
            )
            rankings["entity+rerank"] = [gallery[i] for i in order]
        for name, system in (extra_systems or {}).items():
            rankings[name] = _rank(gallery, torch.tensor(system(row["query"], gallery)))
        results.append(_query_result(row, gallery, relevant, rankings))
    patients = {r["query"]: data.studies[r["query"]].patient_id for r in results}
    return {
        "queries": results,
        "summary": summarize_retrieval(results, patients),
        "by_entity": retrieval_by_entity(results),
    }


def _rerank(
    reranker: RerankerScorer,
    block: EncodedStudies,
    conditioned: tuple[torch.Tensor, torch.Tensor],
    query_index: int,
    gallery_index: torch.Tensor,
    entity_scores: torch.Tensor,
    rerank_top: int,
    fusion_weight: float,
) -> list[int]:
    """Gallery positions by entity similarity, the top `rerank_top` reordered by that score fused
    with the reranker's probability. `block`: the encoded group of the query and its gallery;
    `conditioned`: that group's (features, attention) conditioned on the query's entity."""
    features, attention = conditioned
    order = torch.argsort(entity_scores, descending=True)
    top = order[:rerank_top]
    inputs = RerankerScorer.pair_inputs(
        block.tokens[query_index],
        attention[query_index],
        features[query_index],
        block.tokens[gallery_index[top]],
        attention[gallery_index[top]],
        features[gallery_index[top]],
        reranker.reranker.config.top_k,
    )
    probabilities = reranker.score(inputs, block.modality_ids[gallery_index[top]])
    fused = fuse_scores(entity_scores[top], probabilities, fusion_weight)
    reordered = top[torch.argsort(fused, descending=True)]
    return reordered.tolist() + order[rerank_top:].tolist()


def _query_result(row: dict, gallery: list[str], relevant: set[str], rankings: dict[str, list[str]]) -> dict:
    """One query's record: what it asked, and each system's Recall@k, NDCG@5 and top 5."""
    return {
        "query": row["query"],
        "entity_id": row["entity_id"],
        "modality": row["modality"],
        "level": entity_level(row["entity_id"]),
        "relevant": sorted(relevant),
        "gallery_size": len(gallery),
        "systems": {
            name: {
                **{f"recall@{k}": recall_at_k(ranked, relevant, k) for k in KS},
                "ndcg@5": ndcg_at_k(ranked, relevant, 5),
                "top": ranked[:5],
            }
            for name, ranked in rankings.items()
        },
    }


def retrieval_by_entity(results: list[dict]) -> dict[str, dict]:
    """Per entity (sorted by modality, level and id): its queries and each system's Recall@1."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for result in results:
        groups[result["entity_id"]].append(result)
    table = {}
    for entity, members in sorted(
        groups.items(), key=lambda item: (item[1][0]["modality"], item[1][0]["level"], item[0])
    ):
        table[entity] = {
            "modality": members[0]["modality"],
            "level": members[0]["level"],
            "queries": len(members),
            **{
                system: float(np.mean([m["systems"][system]["recall@1"] for m in members]))
                for system in members[0]["systems"]
            },
        }
    return table


def _rank(gallery: list[str], scores: torch.Tensor) -> list[str]:
    # stable order for ties so that runs are reproducible
    order = np.argsort(-scores.numpy(), kind="stable")
    return [gallery[i] for i in order]


def chance_recall(gallery_size: int, relevant: int, k: int) -> float:
    """Expected Recall@k of a random ranking: 1 - C(n - r, k) / C(n, k)."""
    if k >= gallery_size:
        return 1.0
    return 1.0 - math.comb(gallery_size - relevant, k) / math.comb(gallery_size, k)


def summarize_retrieval(results: list[dict], patients: dict[str, str] | None = None) -> dict:
    """Per modality and entity level (and "all"): each system's Recall@k with Wilson intervals,
    NDCG@5, McNemar tests on Recall@1 of entity vs holistic and entity+rerank vs entity, and the
    Recall@k a random ranking would get on the same queries (`chance`). With `patients` (query ->
    patient), also patient-clustered ones: Recall@1's cluster-bootstrap interval
    (`recall@1_ci95_clustered`) and, per comparison, the difference with its clustered interval and
    sign-flip p-value (`clustered_recall@1`): one patient's queries are not independent evidence."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for result in results:
        for modality in (result["modality"], "all"):
            for level in (result["level"], "all"):
                groups[(modality, level)].append(result)
    summary: dict = {}
    for (modality, level), members in sorted(groups.items()):
        systems = members[0]["systems"].keys()
        clusters = None if patients is None else [patients[m["query"]] for m in members]
        entry = {"queries": len(members)}
        for system in systems:
            stats = {}
            for k in KS:
                hits = [m["systems"][system][f"recall@{k}"] for m in members]
                low, high = wilson_interval(int(sum(hits)), len(hits))
                stats[f"recall@{k}"] = float(np.mean(hits))
                stats[f"recall@{k}_ci95"] = [low, high]
            stats["ndcg@5"] = float(np.mean([m["systems"][system]["ndcg@5"] for m in members]))
            if clusters is not None:
                hits = [m["systems"][system]["recall@1"] for m in members]
                stats["recall@1_ci95_clustered"] = list(clustered_mean(hits, clusters)["interval"])
            entry[system] = stats
        tests, clustered = {}, {}
        extras = [name for name in systems if name not in ("entity", "entity+rerank", "holistic")]
        for a, b in (("entity", "holistic"), ("entity+rerank", "entity"), *(("entity", name) for name in extras)):
            if a in systems and b in systems:
                hits_a = [bool(m["systems"][a]["recall@1"]) for m in members]
                hits_b = [bool(m["systems"][b]["recall@1"]) for m in members]
                tests[f"{a} vs {b}"] = mcnemar_test(hits_a, hits_b)
                if clusters is not None:
                    clustered[f"{a} vs {b}"] = clustered_paired_test(hits_a, hits_b, clusters)
        entry["mcnemar_recall@1"] = tests
        if clusters is not None:
            entry["clustered_recall@1"] = clustered
        entry["chance"] = {
            f"recall@{k}": float(np.mean([chance_recall(m["gallery_size"], len(m["relevant"]), k) for m in members]))
            for k in KS
        }
        summary.setdefault(modality, {})[level] = entry
    return summary


__all__ = ["KS", "chance_recall", "entity_level", "evaluate_retrieval", "retrieval_by_entity", "summarize_retrieval"]
