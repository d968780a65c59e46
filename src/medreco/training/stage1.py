"""Stage 1 (`medreco train stage1`): the retrieval model.

Phase 1, alignment: images with their reports, symmetric InfoNCE (the warm-up of section 4.3).
Phase 2, ranking: mined triplets (anchor, positive, negative, entity) with the triplet loss and
in-batch hard negatives: every candidate of the batch is scored under every anchor's entity, and
the retrieval table of the training split says which of those pairs are relevant (1), irrelevant
(0) or unknown (-1, left out: reports silent on the entity, or in between the mining thresholds).
The text encoder is fine-tuned in both phases, as in the paper, unless `freeze_text_encoder`
(then each report is encoded once and alignment steps cost the vision side only).

Temporal pretraining (`num_temporal_layers`, `temporal_alignment_weight`, `change_aware_weight`):
alignment batches also carry each study's prior (from the mined longitudinal table), so BioViL-T's
image-report alignment runs on the prior-fused tokens too, and TILA's change-aware sigmoid loss on
the pair read backwards; the ranking phase is unchanged (it ranks static features).

`ranking_target: study` trains the holistic baseline instead: the same triplets' images ranked by
whole-image features, relevance from whole-report agreement (same architecture, data and steps).

Output: `output_dir/final/` holds the model, its tokenizer and image processor (`from_pretrained`
loads each), `training_config.json` and `summary.json`."""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer, set_seed

from ..data.mining import MinedData
from ..data.mining.longitudinal import study_trends
from ..data.mining.similarity import statement_key
from ..data.reports.negation import ABNORMAL_STATUSES, NegationPhrasebook, report_variants
from ..data.reports.ontology import entity_prompts
from ..factory import create_model, resolve_text_encoder
from ..modeling import (
    PROGRESSION_CLASSES,
    CandidateBatch,
    MedReCoModel,
    PriorBatch,
    ReportSupervision,
    StatementBatch,
    TextBatch,
    attach_trend_parts,
)
from ..processing import MedReCoImageProcessor, MedReCoRetrievalProcessor
from .config import DataConfig, ModelSource, RecipeError, Stage1Config
from .data import ImageStore, batch_size_rule, check_nonempty, train_transforms
from .loop import Phase, PhaseResult, train_phase, write_run_record
from .progression import with_temporal_parts

logger = logging.getLogger(__name__)


def build_retrieval_model(source: ModelSource, text_encoder: str, **fields) -> tuple[MedReCoModel, object]:
    """The retrieval model and its tokenizer: from a checkpoint, or a preset with pretrained text weights."""
    if source.init_from:
        model = MedReCoModel.from_pretrained(source.init_from)
        return model, AutoTokenizer.from_pretrained(source.init_from)
    model = create_model(
        "retrieval",
        source.preset,
        load_text_weights=True,
        text_model_name_or_path=text_encoder,
        **{**fields, **source.overrides},
    )
    return model, AutoTokenizer.from_pretrained(resolve_text_encoder(text_encoder))


def build_image_processor(data: DataConfig, modalities: list[str]) -> MedReCoImageProcessor:
    return MedReCoImageProcessor(modalities=modalities, recipes=data.recipes, tensor_cache_dir=data.tensor_cache_dir)


def ranking_relevance(
    rows: list[dict], candidates: list[str], lookup: dict, patient_of: dict[str, str]
) -> torch.Tensor:
    """(A, 2A) relevance of every candidate ([positives; negatives]) under every anchor's entity, in
    the losses' convention: 1 relevant, 0 irrelevant, -1 unknown (left out of the loss)."""
    size = len(rows)
    relevance = torch.full((size, len(candidates)), -1, dtype=torch.long)
    for i, row in enumerate(rows):
        judged, relevant = lookup.get((row["anchor"], row["entity_id"]), (set(), set()))
        for j, candidate in enumerate(candidates):
            if patient_of[candidate] == patient_of[row["anchor"]]:
                continue
            if candidate in relevant:
                relevance[i, j] = 1
            elif candidate in judged:
                relevance[i, j] = 0
        relevance[i, i], relevance[i, size + i] = 1, 0  # the mined triplet itself is authoritative
    return relevance


# Whole-report agreement of a candidate with an anchor: the share of the anchor's judged entities on
# which their reports agree. At least this much: relevant; at most STUDY_IRRELEVANT: irrelevant; in
# between, or judged on fewer than STUDY_MIN_ENTITIES entities: unknown (left out of the loss). Set
# before any run, never tuned.
STUDY_RELEVANT, STUDY_IRRELEVANT, STUDY_MIN_ENTITIES = 2 / 3, 1 / 3, 2


def report_agreement(lookup: dict) -> dict[str, dict[str, float]]:
    """anchor -> candidate -> the share of the anchor's entities (those the mining judged the candidate
    on, at least `STUDY_MIN_ENTITIES`) on which the two reports agree: study-level relevance from the
    entity-level table."""
    judged_count: dict[str, dict[str, int]] = {}
    agreed: dict[str, dict[str, int]] = {}
    for (anchor, _), (judged, relevant) in lookup.items():
        counts, agreements = judged_count.setdefault(anchor, {}), agreed.setdefault(anchor, {})
        for candidate in judged:
            counts[candidate] = counts.get(candidate, 0) + 1
            agreements[candidate] = agreements.get(candidate, 0) + (candidate in relevant)
    return {
        a: {c: agreed[a][c] / n for c, n in counts.items() if n >= STUDY_MIN_ENTITIES}
        for a, counts in judged_count.items()
    }


def study_relevance(
    rows: list[dict], candidates: list[str], agreement: dict[str, dict[str, float]], patient_of: dict[str, str]
) -> torch.Tensor:
    """(A, C) relevance of every candidate to every anchor at the study level (1 relevant, 0 irrelevant,
    -1 unknown), from whole-report agreement: the trained holistic baseline's labels."""
    relevance = torch.full((len(rows), len(candidates)), -1, dtype=torch.long)
    for i, row in enumerate(rows):
        shares = agreement.get(row["anchor"], {})
        for j, candidate in enumerate(candidates):
            share = shares.get(candidate)
            if share is None or patient_of[candidate] == patient_of[row["anchor"]]:
                continue
            relevance[i, j] = 1 if share >= STUDY_RELEVANT else 0 if share <= STUDY_IRRELEVANT else -1
    return relevance


class Stage1Texts:
    """The text side of stage-1 batches: reports, entity prompts and the reports' mined entity
    statements, as tokens, or (frozen text backbone) as pooled features computed once, so that
    alignment steps only run the vision encoder and the projection."""

    def __init__(self, model: MedReCoModel, tokenizer, data: MinedData, config: Stage1Config):
        self.model, self.tokenizer, self.data = model, tokenizer, data
        self.frozen = config.freeze_text_encoder
        self.max_tokens = config.max_report_tokens
        self.progress = config.run.progress
        self.prompts = entity_prompts()
        self.hard_negatives = config.negation_hard_negatives
        self.seed = config.run.seed
        self._phrasebook: NegationPhrasebook | None = None

    def phrasebook(self, studies: list[str]) -> NegationPhrasebook:
        """How the training reports deny and assert each entity (built once)."""
        if self._phrasebook is None:
            self._phrasebook = NegationPhrasebook.from_statements(self.data.studies[s].statements for s in studies)
        return self._phrasebook

    def _rng(self, *keys: str) -> random.Random:
        return random.Random(":".join((str(self.seed), *keys)))  # string seeds hash the same in every process

    def statement_table(self, studies: list[str]) -> dict:
        """What the alignment batches need of the studies' mined statements: each (study, entity)
        statement's text, a group id per distinct content (`statement_key`), and (frozen text
        backbone) the pooled features of every statement and entity prompt, computed once."""
        texts, groups, contents, flipped, flipped_groups = {}, {}, {}, {}, {}
        book = self.phrasebook(studies) if self.hard_negatives else None
        for study in studies:
            for entity, statement in sorted(self.data.studies[study].statements.items()):
                text = " ".join(statement.get("sentences", [])).strip()
                if text:
                    texts[(study, entity)] = text
                    # differently worded, same content: one group
                    content = (entity, statement_key(statement["status"], text))
                    groups[(study, entity)] = contents.setdefault(content, len(contents))
                    negative = book and book.flipped(entity, statement, self._rng(study, entity))
                    if negative:
                        status = "negative" if statement["status"] in ABNORMAL_STATUSES else "positive"
                        flipped[(study, entity)] = negative
                        content = (entity, statement_key(status, negative))
                        flipped_groups[(study, entity)] = contents.setdefault(content, len(contents))
        check_nonempty(list(texts), "entity statements in the training reports", self.data.directory)
        distinct = sorted(set(texts.values()) | set(flipped.values()))
        entities = sorted({entity for _, entity in texts})
        table = {
            "texts": texts,
            "group": groups,
            "flipped": flipped,
            "flipped_group": flipped_groups,
            "pooled": None,
            "row": {t: i for i, t in enumerate(distinct)},
        }
        if self.frozen:
            table["pooled"] = self.pooled(dict(enumerate(distinct)), "encoding statements")
            table["entities"] = self.pooled({e: self.prompts[e] for e in entities}, "entities")
        logger.info(
            "stage1: %d statements (%d texts, %d contents, %d hard negatives) on %d entities",
            len(texts),
            len(distinct),
            len(contents),
            len(flipped),
            len(entities),
        )
        return table

    def statement_batch(self, batch_ids: list[str], table: dict) -> StatementBatch | None:
        """The entity statements of one batch of studies (`MedReCoModel.forward`'s `statements`)."""
        keys = [
            (row, entity)
            for row, study in enumerate(batch_ids)
            for entity in sorted(self.data.studies[study].statements)
            if (study, entity) in table["texts"]
        ]
        if not keys:
            return None
        entities = sorted({entity for _, entity in keys})
        entity_row = {entity: i for i, entity in enumerate(entities)}
        texts = [table["texts"][(batch_ids[row], entity)] for row, entity in keys]
        pairs = torch.tensor([[entity_row[e], row] for row, e in keys], dtype=torch.long)
        groups = torch.tensor([table["group"][(batch_ids[row], entity)] for row, entity in keys], dtype=torch.long)
        flipped = [(batch_ids[row], entity) for row, entity in keys if (batch_ids[row], entity) in table["flipped"]]
        negatives = [table["flipped"][key] for key in flipped]
        negative_groups = torch.tensor([table["flipped_group"][key] for key in flipped], dtype=torch.long)
        if table["pooled"] is not None:
            entity_texts = TextBatch(pooled=torch.stack([table["entities"][e] for e in entities]))
            statement_texts = self.pooled_batch(texts, table)
            negative_texts = self.pooled_batch(negatives, table) if negatives else None
        else:
            entity_texts = self.text_batch([self.prompts[e] for e in entities])
            statement_texts = self.text_batch(texts)
            negative_texts = self.text_batch(negatives) if negatives else None
        if negative_texts is None:
            return StatementBatch(entity_texts, statement_texts, pairs, groups)
        return StatementBatch(entity_texts, statement_texts, pairs, groups, negative_texts, negative_groups)

    @staticmethod
    def pooled_batch(texts: list[str], table: dict) -> TextBatch:
        return TextBatch(pooled=torch.stack([table["pooled"][table["row"][t]] for t in texts]))

    def report_table(self, studies: list[str], clinical: bool) -> dict:
        """CLIP-clinic's report side: each study's hard-negative report (when `negation_hard_negatives`:
        its report with one positive finding denied; for a normal study, a training report of the
        same modality asserting a single finding) and, when `clinical`, the clinical-label vector of
        each report and hard negative (1 positive, 0.5 uncertain per entity, and a last "no finding"
        slot), with the pooled features of the hard negatives (frozen text backbone)."""
        book = self.phrasebook(studies) if self.hard_negatives else None
        entities = sorted({e for s in studies for e in self.data.studies[s].statements})
        column = {entity: i for i, entity in enumerate(entities)}

        def labels(statements: dict) -> torch.Tensor:
            vector = torch.zeros(len(entities) + 1)
            for entity, statement in statements.items():
                if entity in column and statement["status"] in ABNORMAL_STATUSES:
                    vector[column[entity]] = 1.0 if statement["status"] == "positive" else 0.5
            vector[-1] = float(not vector.any())
            return vector

        single = {}  # modality -> the studies whose report asserts exactly one finding
        for study in studies:
            record = self.data.studies[study]
            if sum(st["status"] == "positive" for st in record.statements.values()) == 1:
                single.setdefault(record.modality, []).append(study)
        negatives, negative_labels = {}, {}
        for study in studies if book is not None else ():
            record, rng = self.data.studies[study], self._rng(study, "report")
            variants = report_variants(record.report, record.statements, book, rng)
            if variants is not None:
                negatives[study] = variants.negated
                denied = dict(record.statements)
                denied[variants.entity] = {**denied[variants.entity], "status": "negative"}
                negative_labels[study] = labels(denied)
            elif [s for s in single.get(record.modality, []) if s != study]:
                other = rng.choice([s for s in single[record.modality] if s != study])
                negatives[study] = self.data.studies[other].report
                negative_labels[study] = labels(self.data.studies[other].statements)
        logger.info("stage1: %d hard-negative reports for %d studies", len(negatives), len(studies))
        return {
            "negatives": negatives,
            "pooled": self.pooled(negatives, "encoding hard negatives") if self.frozen and negatives else {},
            "labels": {s: labels(self.data.studies[s].statements) for s in studies} if clinical else None,
            "negative_labels": negative_labels,
        }

    def report_supervision(self, batch_ids: list[str], table: dict) -> ReportSupervision:
        """The hard-negative reports and clinical labels of one alignment batch."""
        with_negative = [s for s in batch_ids if s in table["negatives"]]
        hard_negatives = None
        if with_negative and self.frozen:
            hard_negatives = TextBatch(pooled=torch.stack([table["pooled"][s] for s in with_negative]))
        elif with_negative:
            hard_negatives = self.text_batch([table["negatives"][s] for s in with_negative])
        clinical = None
        if table["labels"] is not None:
            rows = [table["labels"][s] for s in batch_ids] + [table["negative_labels"][s] for s in with_negative]
            clinical = torch.stack(rows)
        rows = torch.tensor([batch_ids.index(s) for s in with_negative], dtype=torch.long) if with_negative else None
        return ReportSupervision(hard_negatives, clinical, rows)

    def text_batch(self, texts: list[str]) -> TextBatch:
        tokens = self.tokenize(texts)
        return TextBatch(tokens["input_ids"], tokens["attention_mask"])

    def tokenize(self, texts: list[str]):
        return self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_tokens, return_tensors="pt")

    def pooled_reports(self, studies: list[str]) -> dict[str, torch.Tensor]:
        """Each report's pooled output of the frozen text backbone, computed once, so alignment
        steps only run the vision encoder and the projection."""
        return self.pooled({s: self.data.studies[s].report for s in studies}, "encoding reports")

    @torch.no_grad()
    def pooled(self, texts: dict[str, str], description: str, batch_size: int = 32) -> dict[str, torch.Tensor]:
        """The frozen text backbone's pooled output of each text (keyed like `texts`), computed on
        this process's GPU when there is one."""
        encoder = self.model.text_encoder
        was_training, home = encoder.training, next(encoder.parameters()).device
        # the accelerator does not exist yet, and creating its state here would precede the
        # launcher's setup; the local rank names the GPU it will use
        gpu = torch.cuda.is_available() and os.environ.get("ACCELERATE_USE_CPU", "").lower() not in ("1", "true")
        device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}") if gpu else home
        encoder.eval().to(device)
        keys, pooled = sorted(texts, key=lambda key: len(texts[key])), {}  # similar lengths pad little
        batches = range(0, len(keys), batch_size)
        for start in tqdm(batches, desc=description, disable=not self.progress, leave=False):
            chunk = keys[start : start + batch_size]
            text = self.tokenize([texts[k] for k in chunk]).to(device)
            features = encoder.pool(text["input_ids"], text["attention_mask"]).float().cpu()
            pooled.update(zip(chunk, features, strict=True))
        encoder.train(was_training).to(home)
        return pooled


class Stage1Trainer:
    """Builds the data and model of a stage-1 recipe and runs both phases."""

    def __init__(self, config: Stage1Config):
        self.config = config
        set_seed(config.run.seed)  # model initialisation included: a seed reproduces the run
        self.data = MinedData(config.data.mined_dir, config.data.modalities)
        self.model, self.tokenizer = build_retrieval_model(
            config.model,
            config.text_encoder,
            freeze_text_encoder=config.freeze_text_encoder,
            triplet_margin=config.triplet_margin,
            ranking_loss=config.ranking_loss,
        )
        if config.freeze_text_encoder:  # also when starting from a checkpoint saved unfrozen
            self.model.config.freeze_text_encoder = True
            self.model.set_text_backbone_trainable(False)
        if config.statement_alignment_weight:
            self.model.config.statement_alignment_weight = config.statement_alignment_weight
        for name in ("text_soft_label_threshold", "clinical_soft_label_threshold"):
            if getattr(config, name) is not None:
                setattr(self.model.config, name, getattr(config, name))
        self.model = self._temporal_model(self.model)
        if config.trend_weight or config.rationale_weight:
            self.model = attach_trend_parts(self.model, config.trend_weight, config.rationale_weight)
        self.image_processor = build_image_processor(config.data, list(self.model.config.vision_config.modalities))
        train_ids = self.data.study_ids("train")
        check_nonempty(train_ids, "training-split studies", self.data.directory)
        trained = sorted({self.data.studies[s].modality for s in train_ids})
        self.store = ImageStore(
            self.image_processor,
            {s: self.data.studies[s] for s in self.data.study_ids()},
            preload=config.data.preload_images,
            progress=config.run.progress,
            transforms=train_transforms(config.data, self.image_processor, trained),
            seed=config.run.seed,
        )
        self.store.check_transforms(train_ids)
        self.texts = Stage1Texts(self.model, self.tokenizer, self.data, config)
        self.prompts = self.texts.prompts

    def _temporal_model(self, model: MedReCoModel) -> MedReCoModel:
        """The model with the recipe's fusion blocks and temporal loss weights (unchanged when the
        recipe asks for none)."""
        config = self.config
        if not (config.num_temporal_layers or config.temporal_alignment_weight or config.change_aware_weight):
            return model
        layers = config.num_temporal_layers or model.config.vision_config.num_temporal_layers
        if not layers:
            raise RecipeError(
                "stage1.temporal_alignment_weight and change_aware_weight need prior-image fusion: "
                "set stage1.num_temporal_layers"
            )
        return with_temporal_parts(
            model,
            layers,
            temporal_alignment_weight=config.temporal_alignment_weight,
            change_aware_weight=config.change_aware_weight,
        )

    def prior_table(self) -> dict[str, tuple[str, bool]] | None:
        """current study -> (its prior, whether its report describes a change), from the training
        split's longitudinal table; None when the model trains no temporal loss."""
        config = self.model.config
        losses = (
            config.temporal_alignment_weight,
            config.change_aware_weight,
            config.trend_weight,
            config.rationale_weight,
        )
        if not any(losses):
            return None
        priors: dict[str, tuple[str, bool]] = {}
        for row in self.data.rows("longitudinal", "train"):
            prior, changed = priors.get(row["current"], (row["prior"], False))
            priors[row["current"]] = (prior, changed or row["label"] != "stable")
        check_nonempty(list(priors), "training studies with a prior (longitudinal rows)", self.data.directory)
        logger.info(
            "stage1: %d studies with a prior, %d of them changed", len(priors), sum(c for _, c in priors.values())
        )
        return priors

    def trend_table(self, priors: dict[str, tuple[str, bool]], reports: dict | None) -> dict | None:
        """TAMM's supervision, when the model trains its losses: current study -> its `StudyTrend`
        with the training split's prior (`study_trends`), and (frozen text backbone) the pooled
        features of the rationales; `reports`, the pooled reports, serve the priors' reports."""
        config = self.model.config
        if not (config.trend_weight or config.rationale_weight):
            return None
        rows = self.data.rows("longitudinal", "train")
        trends = {
            t.current: t
            for t in study_trends(rows, lambda study: self.data.studies[study].statements)
            if t.current in priors and priors[t.current][0] == t.prior
        }
        check_nonempty(list(trends), "training study pairs with a trend (longitudinal rows)", self.data.directory)
        logger.info("stage1: %d study pairs with a trend (TAMM)", len(trends))
        table = {"trends": trends, "reports": reports, "pooled": None}
        if self.config.freeze_text_encoder:
            texts = {
                (kind, s): getattr(t, kind) for s, t in trends.items() for kind in ("rationale", "counter_rationale")
            }
            table["pooled"] = self.texts.pooled(texts, "encoding rationales")
        return table

    def prior_batch(
        self,
        batch_ids: list[str],
        priors: dict[str, tuple[str, bool]],
        pixel_values: torch.Tensor,
        trends: dict | None = None,
    ) -> PriorBatch:
        """The priors of one alignment batch (`pixel_values`: the current images); only the priors
        that exist are read, zeros stand in for the rest (the model does not read those rows). With
        `trends` (`trend_table`), each pair's trend and, for the pairs that have one, the priors'
        reports and the rationales."""
        has_prior = torch.tensor([s in priors for s in batch_ids])
        prior_pixels = torch.zeros_like(pixel_values)
        if has_prior.any():
            read, _ = self.store.batch([priors[s][0] for s in batch_ids if s in priors])
            prior_pixels[has_prior] = read.to(prior_pixels.dtype)
        changed = torch.tensor([priors.get(s, (s, False))[1] for s in batch_ids])
        if trends is None:
            return PriorBatch(prior_pixels, has_prior, changed)
        known = [s for s in batch_ids if s in trends["trends"]]
        trend = torch.tensor(
            [PROGRESSION_CLASSES.index(trends["trends"][s].trend) if s in trends["trends"] else -1 for s in batch_ids]
        )
        if not known:
            return PriorBatch(prior_pixels, has_prior, changed, trend)
        prior_studies = [trends["trends"][s].prior for s in known]
        if trends["reports"] is not None and all(p in trends["reports"] for p in prior_studies):
            prior_reports = TextBatch(pooled=torch.stack([trends["reports"][p] for p in prior_studies]))
        else:
            prior_reports = self.texts.text_batch([self.data.studies[p].report for p in prior_studies])
        rationales = []
        for kind in ("rationale", "counter_rationale"):
            if trends["pooled"] is not None:
                rationales.append(TextBatch(pooled=torch.stack([trends["pooled"][(kind, s)] for s in known])))
            else:
                rationales.append(self.texts.text_batch([getattr(trends["trends"][s], kind) for s in known]))
        return PriorBatch(prior_pixels, has_prior, changed, trend, prior_reports, *rationales)

    # ---- phase 1: image-report alignment
    def alignment_phase(self) -> Phase:
        studies = [s for s in self.data.study_ids("train") if self.data.studies[s].report.strip()]
        studies = studies[: self.config.data.max_train_samples or None]
        check_nonempty(studies, "studies with reports", self.data.directory)
        optimization = self.config.alignment
        pooled = self.texts.pooled_reports(studies) if self.config.freeze_text_encoder else None
        statements = self.texts.statement_table(studies) if self.config.statement_alignment_weight else None
        priors = self.prior_table()
        trends = self.trend_table(priors, pooled) if priors is not None else None
        clinical = self.model.config.clinical_soft_label_threshold is not None
        supervision = None
        if self.config.negation_hard_negatives or clinical:
            supervision = self.texts.report_table(studies, clinical)

        def collate(batch_ids: list[str]) -> dict:
            pixel_values, modality_ids = self.store.batch(batch_ids)
            if pooled is not None:
                reports = TextBatch(pooled=torch.stack([pooled[s] for s in batch_ids]))
            else:
                reports = self.texts.text_batch([self.data.studies[s].report for s in batch_ids])
            batch = {"pixel_values": pixel_values, "modality_ids": modality_ids, "reports": reports}
            if statements is not None:
                batch["statements"] = self.texts.statement_batch(batch_ids, statements)
            if priors is not None:
                batch["priors"] = self.prior_batch(batch_ids, priors, pixel_values, trends)
            if supervision is not None:
                batch["report_supervision"] = self.texts.report_supervision(batch_ids, supervision)
            return batch

        return Phase(
            "stage1/alignment",
            studies,
            [self.data.studies[s].modality for s in studies],
            batch_size_rule(self.image_processor, optimization.batch_size_2d, optimization.batch_size_3d),
            collate,
            lambda model, batch: model(**batch).loss,
            self.store.set_epoch,
        )

    # ---- phase 2: entity-conditioned ranking
    def ranking_phase(self) -> Phase:
        rows = self.data.rows("triplets", "train")[: self.config.data.max_train_samples or None]
        check_nonempty(rows, "training triplets", self.data.directory)
        lookup = self.data.relevance_table("train")
        patient_of = {s: study.patient_id for s, study in self.data.studies.items()}
        optimization = self.config.ranking
        holistic = self.config.ranking_target == "study"
        agreement = report_agreement(lookup) if holistic else None
        pooled = None
        if self.config.freeze_text_encoder and not holistic:  # a few dozen entity prompts, encoded once
            pooled = self.texts.pooled({e: self.prompts[e] for e in sorted({r["entity_id"] for r in rows})}, "entities")

        def collate(batch_rows: list[dict]) -> dict:
            candidates = [r["positive"] for r in batch_rows] + [r["negative"] for r in batch_rows]
            anchors, modality_ids = self.store.batch([r["anchor"] for r in batch_rows])
            candidate_pixels, candidate_modalities = self.store.batch(candidates)
            if holistic:
                entities = None
                relevance = study_relevance(batch_rows, candidates, agreement, patient_of)
            else:
                relevance = ranking_relevance(batch_rows, candidates, lookup, patient_of)
                if pooled is not None:
                    entities = TextBatch(pooled=torch.stack([pooled[r["entity_id"]] for r in batch_rows]))
                else:
                    tokens = self.tokenizer(
                        [self.prompts[r["entity_id"]] for r in batch_rows], padding=True, return_tensors="pt"
                    )
                    entities = TextBatch(tokens["input_ids"], tokens["attention_mask"])
            return {
                "pixel_values": anchors,
                "modality_ids": modality_ids,
                "entities": entities,
                "candidates": CandidateBatch(candidate_pixels, candidate_modalities, relevance),
            }

        size_rule = batch_size_rule(self.image_processor, optimization.batch_size_2d, optimization.batch_size_3d)
        groups = [r["modality"] for r in rows]
        if self.config.entity_batches:
            # "modality|entity" keys: the sampler makes batches homogeneous in both
            groups = [f"{r['modality']}|{r['entity_id']}" for r in rows]
        return Phase(
            "stage1/ranking",
            rows,
            groups,
            lambda group: size_rule(group.split("|")[0]),
            collate,
            lambda model, batch: model(**batch).loss,
            self.store.set_epoch,
        )

    def train(self, stop_after: int | None = None) -> dict:
        """Both phases, then the final save. Returns the summaries of the phases."""
        out = Path(self.config.run.output_dir)
        summaries = {}
        model = self.model
        result: PhaseResult | None = None
        for build_phase, optimization in (
            (self.alignment_phase, self.config.alignment),
            (self.ranking_phase, self.config.ranking),
        ):
            if optimization.epochs <= 0 and not optimization.max_steps:
                continue  # a phase switched off needs none of its data
            phase = build_phase()
            rates = None
            if self.config.text_encoder_learning_rate is not None:
                rates = {"text_encoder.backbone.": self.config.text_encoder_learning_rate}
            result = train_phase(
                model,
                phase,
                optimization,
                self.config.run,
                out / phase.name.split("/")[-1],
                learning_rates=rates,
                stop_after=stop_after,
            )
            summaries[phase.name] = result.summary
            model = result.model
            if result.summary.get("stopped_early"):
                return summaries
        self.model = model
        if result is not None:
            result.save_pretrained(out / "final", self._save_companions(summaries))
        return summaries

    def _save_companions(self, summaries: dict):
        def write(folder: Path) -> None:
            MedReCoRetrievalProcessor(self.image_processor, self.tokenizer).save_pretrained(folder)
            write_run_record(folder, self.config, summaries, "retrieval")

        return write


def train_stage1(config: Stage1Config, stop_after: int | None = None) -> dict:
    """Run a stage-1 recipe; see [`Stage1Trainer`]."""
    return Stage1Trainer(config).train(stop_after=stop_after)


__all__ = [
    "Stage1Texts",
    "Stage1Trainer",
    "build_image_processor",
    "build_retrieval_model",
    "STUDY_IRRELEVANT",
    "STUDY_MIN_ENTITIES",
    "STUDY_RELEVANT",
    "report_agreement",
    "study_relevance",
    "train_stage1",
]
