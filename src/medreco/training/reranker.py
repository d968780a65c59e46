"""Reranker training (`medreco train reranker`).

Candidates come from the trained coarse model's own top ranks: for every training-split query
(a study and an entity its report mentions) the coarse model ranks the gallery under that entity,
and its top `candidates_per_query` become training pairs, labelled relevant or not by the report
similarity of the mining step (the retrieval table). Those are exactly the hard negatives the
reranker meets at search time; if no relevant study reached the top, the best-ranked relevant one
is added so each query contributes a positive. The coarse model stays frozen; its conditioned
features and attention-selected tokens are computed once. Loss: binary cross-entropy."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import set_seed

from ..data.mining import MinedData
from ..data.reports.ontology import entity_prompts
from ..factory import create_model
from ..modeling import MedReCoReranker, select_top_tokens
from .config import RerankerTrainingConfig
from .data import ImageStore, batch_size_rule, check_nonempty, frozen_retrieval_encoder, refuse_train_transforms
from .loop import Phase, PhaseResult, train_phase, write_run_record

logger = logging.getLogger(__name__)


@dataclass
class ConditionedGroup:
    """Coarse-model outputs for one (modality, entity): features `(S, d)` and top tokens `(S, K, d)`."""

    features: torch.Tensor
    top_tokens: torch.Tensor
    modality_id: int


@dataclass
class RerankerPair:
    key: tuple[str, str]  # (modality, entity prompt)
    query: int
    candidate: int
    label: float
    modality: str


class RerankerTrainer:
    def __init__(self, config: RerankerTrainingConfig):
        self.config = config
        refuse_train_transforms(config.data, "reranker")
        set_seed(config.run.seed)  # model initialisation included: a seed reproduces the run
        self.encoder = frozen_retrieval_encoder(config.retrieval_model, config.data)
        self.data = MinedData(config.data.mined_dir, config.data.modalities)
        vision = self.encoder.model.config.vision_config
        if config.model.init_from:
            self.model = MedReCoReranker.from_pretrained(config.model.init_from)
        else:
            self.model = create_model(
                "reranker",
                config.model.preset,
                **{"hidden_size": vision.hidden_size, "modalities": list(vision.modalities), **config.model.overrides},
            )
        if self.model.config.hidden_size != vision.hidden_size:
            raise ValueError(
                f"reranker hidden_size {self.model.config.hidden_size} != retrieval model's {vision.hidden_size}"
            )

    def build_pairs(self, split: str = "train") -> tuple[list[RerankerPair], dict[tuple[str, str], ConditionedGroup]]:
        rows = self.data.rows("retrieval", split)[: self.config.data.max_train_samples or None]
        check_nonempty(rows, f"{split} retrieval queries (needed to label reranker candidates)", self.data.directory)
        store = ImageStore(
            self.encoder.image_processor,
            {
                s: self.data.studies[s]
                for s in {r["query"] for r in rows} | {g for r in rows for g in r["gallery"]}
                if s in self.data.studies
            },
            preload=self.config.data.preload_images,
            progress=self.config.run.progress,
        )
        ids = sorted(store.studies)
        encoded = self.encoder.encode_images(
            [None] * len(ids),
            [self.data.studies[s].modality for s in ids],
            ids,
            progress=self.config.run.progress,
            tensors=store,
        )
        by_modality = {self.data.studies[g.study_ids[0]].modality: g for g in encoded}
        position = {s: i for g in encoded for i, s in enumerate(g.study_ids)}
        prompts = entity_prompts()
        labelled = self.data.relevance_table(split)
        groups: dict[tuple[str, str], ConditionedGroup] = {}
        pairs: list[RerankerPair] = []
        top_k = self.model.config.top_k
        for row in tqdm(rows, desc="mining reranker candidates", disable=not self.config.run.progress, leave=False):
            modality, prompt = row["modality"], prompts.get(row["entity_id"], row["entity_id"])
            block = by_modality[modality]
            key = (modality, prompt)
            if key not in groups:
                features, attention = self.encoder.condition(block.tokens, block.modality_ids, prompt)
                groups[key] = ConditionedGroup(
                    features, select_top_tokens(block.tokens, attention, top_k), int(block.modality_ids[0])
                )
            group = groups[key]
            # only studies the mining judged: silent or in-between reports are unknown, not negatives
            judged, relevant = labelled[(row["query"], row["entity_id"])]
            gallery = [s for s in row["gallery"] if s in position and s in judged]
            if not gallery or not relevant & set(gallery):
                continue
            query = position[row["query"]]
            gallery_index = torch.tensor([position[s] for s in gallery])
            scores = group.features[gallery_index] @ group.features[query]
            order = torch.argsort(scores, descending=True).tolist()
            chosen = order[: self.config.candidates_per_query]
            if not any(gallery[i] in relevant for i in chosen):
                chosen[-1] = next(i for i in order if gallery[i] in relevant)
            pairs += [
                RerankerPair(key, query, int(gallery_index[i]), float(gallery[i] in relevant), modality) for i in chosen
            ]
        check_nonempty(pairs, "reranker pairs", self.data.directory)
        return pairs, groups

    def phase(self) -> Phase:
        pairs, groups = self.build_pairs("train")
        positives = sum(p.label for p in pairs)
        logger.info("reranker: %d pairs, %.1f%% relevant", len(pairs), 100 * positives / len(pairs))
        optimization = self.config.optimization

        def collate(batch: list[RerankerPair]) -> dict:
            return {
                "query_tokens": torch.stack([groups[p.key].top_tokens[p.query] for p in batch]),
                "query_features": torch.stack([groups[p.key].features[p.query] for p in batch]),
                "candidate_tokens": torch.stack([groups[p.key].top_tokens[p.candidate] for p in batch]),
                "candidate_features": torch.stack([groups[p.key].features[p.candidate] for p in batch]),
                "modality_ids": torch.tensor([groups[p.key].modality_id for p in batch]),
                "labels": torch.tensor([p.label for p in batch]),
            }

        processor = self.encoder.image_processor
        return Phase(
            "reranker",
            pairs,
            [p.modality for p in pairs],
            batch_size_rule(processor, optimization.batch_size_2d, optimization.batch_size_3d),
            collate,
            lambda model, batch: model(**batch).loss,
        )

    def train(self, stop_after: int | None = None) -> dict:
        out = Path(self.config.run.output_dir)
        result: PhaseResult = train_phase(
            self.model, self.phase(), self.config.optimization, self.config.run, out / "reranker", stop_after=stop_after
        )
        self.model = result.model
        if not result.summary.get("stopped_early"):
            config = self.config

            image_processor = self.encoder.image_processor

            def companions(folder: Path) -> None:
                image_processor.save_pretrained(folder)  # the images the reranker's tokens came from
                write_run_record(folder, config, result.summary, "reranker")

            result.save_pretrained(out / "final", companions)
        return {"reranker": result.summary}


def train_reranker(config: RerankerTrainingConfig, stop_after: int | None = None) -> dict:
    return RerankerTrainer(config).train(stop_after=stop_after)


__all__ = ["RerankerTrainer", "train_reranker"]
