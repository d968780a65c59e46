"""The entity-conditioned retrieval model (paper, section 4.5, stage 1).

An image's visual tokens are turned into an entity-aware feature by a cross-attention
conditioner whose query is the entity's text embedding (or a learned CLS query for whole-image
retrieval). Similarity between two images under an entity is the dot product of their
L2-normalised features (Eq. 4)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init
from transformers.utils import ModelOutput

from .blocks import ModalityExpertsFeedForward, check_modality_ids
from .configuration_retrieval import MedReCoConditionerConfig, MedReCoConfig
from .inputs import CandidateBatch, PriorBatch, ProgressionBatch, ReportSupervision, StatementBatch, TextBatch
from .losses import (
    change_aware_sigmoid_loss,
    contrastive_ranking_loss,
    dynamic_soft_labels,
    rationale_consistency_loss,
    smooth_ap_loss,
    soft_target_infonce_loss,
    symmetric_infonce_loss,
    trend_classification_loss,
    triplet_loss_with_hard_negatives,
    triplet_relevance,
)
from .modeling_utils import MedReCoPreTrainedModel
from .modeling_vision import MedReCoVisionModel, MedReCoVisionOutput
from .text_encoder import MedReCoTextEncoder, build_text_backbone
from .trend import PROGRESSION_CLASSES, RationaleConditionedPredictor


@dataclass
class ConditionerOutput(ModelOutput):
    """features: L2-normalised entity-aware features, `(B, hidden)`, or `(E, B, hidden)` when every
    entity was applied to every image. attention: the last layer's head-averaged attention of the
    query over the visual tokens, `(B, N)` or `(E, B, N)`."""

    features: torch.Tensor | None = None
    attention: torch.Tensor | None = None


@dataclass
class MedReCoOutput(ModelOutput):
    """Outputs of [`MedReCoModel.forward`]. Alignment fills `image_embeds`, `text_embeds`,
    `logits_per_image` (and `statement_loss` when statements were given); ranking fills
    `anchor_embeds`, `candidate_embeds` `(A, C, hidden)` and `similarity` `(A, C)`; progression
    fills `progression_logits` `(B, 3)` and, for the pair read backwards, `reversed_progression_logits`.
    `temporal_loss` is the part of an alignment loss computed on the prior-fused tokens."""

    loss: torch.Tensor | None = None
    image_embeds: torch.Tensor | None = None
    text_embeds: torch.Tensor | None = None
    logits_per_image: torch.Tensor | None = None
    statement_loss: torch.Tensor | None = None
    temporal_loss: torch.Tensor | None = None
    anchor_embeds: torch.Tensor | None = None
    candidate_embeds: torch.Tensor | None = None
    similarity: torch.Tensor | None = None
    progression_logits: torch.Tensor | None = None
    reversed_progression_logits: torch.Tensor | None = None


def conditioning_tokens(vision_output: MedReCoVisionOutput, source: str = "pooled") -> torch.Tensor:
    """The tokens the conditioner reads: depth-pooled `(B, N, d)`, or (`source="depth"`) all depth
    tokens `(B, D'N, d)`."""
    if source == "depth":
        batch, depth, tokens, hidden = vision_output.depth_hidden_states.shape
        return vision_output.depth_hidden_states.reshape(batch, depth * tokens, hidden)
    return vision_output.last_hidden_state


class EntityCrossAttentionLayer(nn.Module):
    """One conditioner layer: the query attends to the visual tokens, then a feed-forward layer.

    Queries are `(G, C, hidden)`: G query groups over C images. Keys and values are computed once
    per image and shared by all groups, so scoring every entity against every image (the
    pairwise case of in-batch mining and of gallery indexing) costs one small einsum, not G copies
    of the visual tokens."""

    def __init__(self, config: MedReCoConditionerConfig, hidden_size: int, num_experts: int):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = hidden_size // self.num_heads
        self.scaling = self.head_dim**-0.5
        self.query_norm = nn.LayerNorm(hidden_size, eps=config.layer_norm_eps)
        self.token_norm = nn.LayerNorm(hidden_size, eps=config.layer_norm_eps)
        self.q_proj = nn.Linear(hidden_size, hidden_size)
        self.k_proj = nn.Linear(hidden_size, hidden_size)
        self.v_proj = nn.Linear(hidden_size, hidden_size)
        self.o_proj = nn.Linear(hidden_size, hidden_size)
        self.mlp_norm = nn.LayerNorm(hidden_size, eps=config.layer_norm_eps)
        experts = num_experts if config.use_modality_experts else 1
        self.mlp = ModalityExpertsFeedForward(hidden_size, config.intermediate_size, config.hidden_act, experts)
        self.dropout = config.attention_dropout

    def forward(
        self, queries: torch.Tensor, visual_tokens: torch.Tensor, modality_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        groups, images, hidden = queries.shape
        tokens = self.token_norm(visual_tokens)
        keys = self.k_proj(tokens).view(images, -1, self.num_heads, self.head_dim)
        values = self.v_proj(tokens).view(images, -1, self.num_heads, self.head_dim)
        query = self.q_proj(self.query_norm(queries)).view(groups, images, self.num_heads, self.head_dim)
        scores = torch.einsum("gchd,cnhd->gchn", query, keys) * self.scaling
        weights = scores.softmax(dim=-1, dtype=torch.float32).to(query.dtype)
        weights = nn.functional.dropout(weights, p=self.dropout, training=self.training)
        attended = torch.einsum("gchn,cnhd->gchd", weights, values).reshape(groups, images, hidden)
        queries = queries + self.o_proj(attended)
        # Route by image: the expert dimension is the image dimension (dim 0 after the transpose).
        routed = self.mlp(self.mlp_norm(queries).transpose(0, 1), modality_ids).transpose(0, 1)
        return queries + routed, weights.mean(dim=2)


class MedReCoConditioner(nn.Module):
    """Turns visual tokens plus an entity embedding into an L2-normalised entity-aware feature (Eq. 3)."""

    def __init__(self, config: MedReCoConditionerConfig, hidden_size: int, num_experts: int):
        super().__init__()
        self.cls_query = nn.Parameter(torch.zeros(1, hidden_size))
        # Entity queries start from the CLS query plus a learned projection of the entity embedding,
        # so that at initialisation the (unit-norm) text embedding does not swamp the image evidence
        # that the cross-attention adds to the residual stream.
        self.entity_projection = nn.Linear(hidden_size, hidden_size)
        self.layers = nn.ModuleList(
            EntityCrossAttentionLayer(config, hidden_size, num_experts) for _ in range(config.num_layers)
        )
        self.final_norm = nn.LayerNorm(hidden_size, eps=config.layer_norm_eps)
        self.output_projection = nn.Linear(hidden_size, hidden_size)

    def forward(
        self,
        visual_tokens: torch.Tensor,
        modality_ids: torch.Tensor,
        entity_embeddings: torch.Tensor | None = None,
        entity_mask: torch.Tensor | None = None,
        pairwise: bool = False,
    ) -> ConditionerOutput:
        """visual_tokens `(B, N, hidden)`. entity_embeddings: None (whole image), `(B, hidden)` one
        entity per image, or with `pairwise=True` `(E, hidden)` each entity applied to every image.
        entity_mask `(B,)`/`(E,)`: False rows use the CLS query instead of their entity."""
        images, _, hidden = visual_tokens.shape
        cls = self.cls_query.to(visual_tokens.dtype)
        if entity_embeddings is None:
            queries = cls.expand(1, images, hidden)
        else:
            entity_queries = cls + self.entity_projection(entity_embeddings.to(visual_tokens.dtype))
            if entity_mask is not None:
                entity_queries = torch.where(entity_mask[:, None].bool(), entity_queries, cls)
            if pairwise:
                queries = entity_queries[:, None, :].expand(-1, images, -1)
            else:
                if entity_queries.shape[0] != images:
                    raise ValueError(
                        f"got {entity_queries.shape[0]} entity embeddings for {images} images; pass one per "
                        "image, or pairwise=True to apply each entity to every image"
                    )
                queries = entity_queries[None]
        attention = None
        for layer in self.layers:
            queries, attention = layer(queries, visual_tokens, modality_ids)
        features = nn.functional.normalize(self.output_projection(self.final_norm(queries)).float(), dim=-1)
        if not pairwise:
            features, attention = features[0], attention[0]
        return ConditionerOutput(features=features, attention=attention)


class MedReCoProgressionHead(nn.Module):
    """Interval change of one finding between a prior and a current study (BioViL-T, section 3):
    `V = P_curr (+) P_diff`, the static and the temporal tokens concatenated and projected back to
    the shared width, read by the finding's entity query through a conditioner of its own (the
    retrieval conditioner stays as trained), then a linear classifier over `PROGRESSION_CLASSES`."""

    def __init__(self, config: MedReCoConditionerConfig, hidden_size: int, num_experts: int):
        super().__init__()
        self.combine = nn.Linear(2 * hidden_size, hidden_size)
        self.conditioner = MedReCoConditioner(config, hidden_size, num_experts)
        self.classifier = nn.Linear(hidden_size, len(PROGRESSION_CLASSES))

    def forward(
        self,
        static_tokens: torch.Tensor,
        temporal_tokens: torch.Tensor,
        modality_ids: torch.Tensor,
        entity_embeddings: torch.Tensor,
    ) -> torch.Tensor:
        """Logits `(B, 3)` for one finding (`entity_embeddings` `(B, d)`) per pair."""
        combined = self.combine(torch.cat([static_tokens, temporal_tokens], dim=-1))
        features = self.conditioner(combined, modality_ids, entity_embeddings).features
        return self.classifier(features.to(self.classifier.weight.dtype))


class MedReCoModel(MedReCoPreTrainedModel):
    """Vision encoder + text encoder + entity conditioner for controllable retrieval.

    Example:
    ```python
    >>> tokens = model.get_image_tokens(pixel_values, modality_ids)
    >>> entity = model.get_text_embeddings(**tokenizer(["pleural effusion"], return_tensors="pt"))
    >>> query = model.condition(tokens, modality_ids, entity.expand(len(modality_ids), -1))
    >>> scores = query.features @ gallery_features.T
    ```"""

    config: MedReCoConfig
    config_class = MedReCoConfig
    main_input_name = "pixel_values"
    input_modalities = ("image", "text")

    def __init__(self, config: MedReCoConfig):
        super().__init__(config)
        hidden = config.vision_config.hidden_size
        self.vision_model = MedReCoVisionModel(config.vision_config)
        self.text_encoder = MedReCoTextEncoder(config.text_config, hidden)
        self.conditioner = MedReCoConditioner(config.conditioner_config, hidden, config.vision_config.num_experts)
        # shape (1,), not a 0-d scalar: DeepSpeed broadcasts parameters as byte views, which 0-d tensors refuse
        self.logit_scale = nn.Parameter(torch.tensor([config.logit_scale_init_value]))
        self.progression = (
            MedReCoProgressionHead(config.conditioner_config, hidden, config.vision_config.num_experts)
            if config.progression_head
            else None
        )
        self.trend_head = nn.Linear(hidden, len(PROGRESSION_CLASSES)) if config.trend_weight else None
        self.rationale_predictor = None
        if config.rationale_weight:
            self.rationale_predictor = RationaleConditionedPredictor(
                hidden, config.conditioner_config.intermediate_size
            )
        if config.change_aware_weight:  # TILA's t_swap and b_swap
            self.change_logit_scale = nn.Parameter(torch.tensor([config.change_logit_scale_init_value]))
            self.change_logit_bias = nn.Parameter(torch.tensor([config.change_logit_bias_init_value]))
        self.post_init()
        if config.freeze_text_encoder:
            self.set_text_backbone_trainable(False)

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, MedReCoModel):
            init.constant_(module.logit_scale, self.config.logit_scale_init_value)
            if self.config.change_aware_weight:
                init.constant_(module.change_logit_scale, self.config.change_logit_scale_init_value)
                init.constant_(module.change_logit_bias, self.config.change_logit_bias_init_value)

    def set_text_backbone_trainable(self, trainable: bool) -> None:
        """Freeze or unfreeze the pretrained text backbone; its projection always trains."""
        self.text_encoder.backbone.requires_grad_(trainable)

    def load_pretrained_text_backbone(self, name_or_path: str, **kwargs) -> None:
        """Replace the text backbone by pretrained weights (e.g. BioLORD-2023, or the bundled MiniLM)."""
        backbone = build_text_backbone(None, name_or_path, **kwargs)
        if backbone.config.hidden_size != self.text_encoder.projection.in_features:
            self.text_encoder.projection = nn.Linear(
                backbone.config.hidden_size, self.text_encoder.projection.out_features, bias=False
            )
        self.text_encoder.backbone = backbone
        self.config.text_config = backbone.config
        self.config.text_model_name_or_path = str(name_or_path)
        if self.config.freeze_text_encoder:
            self.set_text_backbone_trainable(False)

    def get_input_embeddings(self) -> nn.Module:
        return self.text_encoder.backbone.get_input_embeddings()

    def get_image_tokens(self, pixel_values: torch.Tensor, modality_ids: torch.Tensor) -> MedReCoVisionOutput:
        return self.vision_model(pixel_values, modality_ids)

    def conditioning_tokens(self, vision_output: MedReCoVisionOutput) -> torch.Tensor:
        return conditioning_tokens(vision_output, self.config.conditioner_token_source)

    def get_text_embeddings(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """L2-normalised embeddings of reports or entity prompts, `(B, hidden)`."""
        return self.text_encoder(input_ids, attention_mask, token_type_ids)

    def embed_unique_texts(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """`get_text_embeddings` with each distinct text encoded once: a batch asks about a few
        entities many times, and the text encoder is the costliest part of a ranking step."""
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        unique, inverse = torch.unique(torch.cat([input_ids, mask], dim=1), dim=0, return_inverse=True)
        if unique.shape[0] == input_ids.shape[0]:
            return self.get_text_embeddings(input_ids, attention_mask)
        width = input_ids.shape[1]
        return self.get_text_embeddings(unique[:, :width], unique[:, width:])[inverse]

    @torch.no_grad()
    def encode_entity_texts(self, texts: list[str], tokenizer, batch_size: int = 64) -> torch.Tensor:
        """Embeddings of free-text entity names, `(E, hidden)`; any text works, known or not."""
        if not texts or any(not str(text).strip() for text in texts):
            raise ValueError("entity texts must be non-empty strings")
        device = self.logit_scale.device
        chunks = []
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(
                list(texts[start : start + batch_size]), padding=True, truncation=True, return_tensors="pt"
            )
            chunks.append(self.get_text_embeddings(batch["input_ids"].to(device), batch["attention_mask"].to(device)))
        return torch.cat(chunks)

    def condition(
        self,
        visual_tokens: torch.Tensor,
        modality_ids: torch.Tensor,
        entity_embeddings: torch.Tensor | None = None,
        entity_mask: torch.Tensor | None = None,
        pairwise: bool = False,
    ) -> ConditionerOutput:
        modality_ids = check_modality_ids(modality_ids, visual_tokens.shape[0], self.config.vision_config.num_experts)
        return self.conditioner(
            visual_tokens, modality_ids.to(visual_tokens.device), entity_embeddings, entity_mask, pairwise
        )

    def get_image_features(
        self,
        pixel_values: torch.Tensor,
        modality_ids: torch.Tensor,
        entity_embeddings: torch.Tensor | None = None,
        entity_mask: torch.Tensor | None = None,
        pairwise: bool = False,
    ) -> ConditionerOutput:
        """Entity-aware features straight from pixels (whole-image features when no entity is given)."""
        tokens = self.conditioning_tokens(self.get_image_tokens(pixel_values, modality_ids))
        return self.condition(tokens, modality_ids, entity_embeddings, entity_mask, pairwise)

    def temporal_tokens(
        self,
        current_tokens: torch.Tensor,
        prior_tokens: torch.Tensor | None,
        modality_ids: torch.Tensor,
        has_prior: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """BioViL-T's `P_diff` from two studies' static tokens (swap them for the reversed pair)."""
        return self.vision_model.fuse_prior(current_tokens, prior_tokens, modality_ids, has_prior)

    def progression_logits(
        self,
        current_tokens: torch.Tensor,
        prior_tokens: torch.Tensor | None,
        modality_ids: torch.Tensor,
        entity_embeddings: torch.Tensor,
        has_prior: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits `(B, 3)` over `PROGRESSION_CLASSES` of the finding `entity_embeddings` `(B, d)`
        between each prior and current study, from their static depth-pooled tokens `(B, N, d)`
        (the vision encoder's `last_hidden_state`). The reversed
        reading (TILA) is the same call with the two token sets swapped."""
        if self.progression is None:
            raise ValueError("this model has no progression head; create it with progression_head=True")
        modality_ids = check_modality_ids(modality_ids, current_tokens.shape[0], self.config.vision_config.num_experts)
        modality_ids = modality_ids.to(current_tokens.device)
        fused = self.temporal_tokens(current_tokens, prior_tokens, modality_ids, has_prior)
        return self.progression(current_tokens, fused, modality_ids, entity_embeddings)

    def predict_progression(
        self,
        pixel_values: torch.Tensor,
        prior_pixel_values: torch.Tensor,
        modality_ids: torch.Tensor,
        entity_embeddings: torch.Tensor,
    ) -> torch.Tensor:
        """`progression_logits` straight from the current and prior images (same shape and modality)."""
        current = self.get_image_tokens(pixel_values, modality_ids).last_hidden_state
        prior = self.get_image_tokens(prior_pixel_values, modality_ids).last_hidden_state
        return self.progression_logits(current, prior, modality_ids, entity_embeddings)

    def _embed(self, texts: TextBatch) -> torch.Tensor:
        """Shared-space embeddings of distinct texts, from pooled backbone outputs or from tokens."""
        if texts.pooled is not None:
            return self.text_encoder.project(texts.pooled)
        if texts.input_ids is None:
            raise ValueError("texts are missing: pass their tokens or their pooled features")
        return self.embed_unique_texts(texts.input_ids, texts.attention_mask)

    def _statement_loss(
        self,
        tokens: torch.Tensor,
        modality_ids: torch.Tensor,
        entity_embeddings: torch.Tensor,
        pairs: torch.Tensor,
        statement_embeds: torch.Tensor,
        groups: torch.Tensor | None,
        negatives: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """InfoNCE between entity-conditioned image features and the statements of their reports;
        `negatives` (embeddings, group ids): hard-negative statements, extra texts in each softmax."""
        if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.shape[0] != statement_embeds.shape[0]:
            raise ValueError(
                f"statement_pairs must be (statements, 2) rows of (entity row, image row); got {tuple(pairs.shape)} "
                f"for {statement_embeds.shape[0]} statements"
            )
        conditioned = self.condition(tokens, modality_ids, entity_embeddings, pairwise=True).features
        image_side = conditioned[pairs[:, 0], pairs[:, 1]]
        if negatives is None:
            return symmetric_infonce_loss(image_side, statement_embeds, self.logit_scale, groups)
        negative_embeds, negative_groups = negatives
        if groups is None or negative_groups is None:
            raise ValueError("hard-negative statements need group ids (StatementBatch.groups and negative_groups)")
        all_groups = torch.cat([groups, negative_groups.to(groups.device)])
        targets = (groups[:, None] == all_groups[None, :]).float()
        texts = torch.cat([statement_embeds, negative_embeds])
        return soft_target_infonce_loss(image_side, texts, self.logit_scale, targets)

    def report_alignment_loss(
        self, image_embeds: torch.Tensor, text_embeds: torch.Tensor, supervision: ReportSupervision | None = None
    ) -> torch.Tensor:
        """Whole-image features against their reports: CLIP's InfoNCE, or with CLIP-clinic's
        `supervision` the hard-negative reports as extra texts and, per soft-label source the
        config switches on, the InfoNCE against its dynamic soft labels (averaged over sources). A
        study's own hard negative gets no share of its target, however similar: it differs from the
        report in one finding, which is what the soft labels, thresholded on whole-report similarity,
        cannot see (a report of five findings and its variant with four have label vectors at
        cosine 0.89, above CLIP-clinic's tau_c)."""
        texts = text_embeds
        if supervision is not None and supervision.hard_negatives is not None:
            texts = torch.cat([text_embeds, self._embed(supervision.hard_negatives)])
        size, config = image_embeds.shape[0], self.config
        sources = []
        if config.text_soft_label_threshold is not None:
            detached = nn.functional.normalize(texts.detach().float(), dim=-1)
            sources.append((detached[:size] @ detached.t(), config.text_soft_label_threshold))
        if config.clinical_soft_label_threshold is not None:
            labels = None if supervision is None else supervision.clinical_labels
            if labels is None or labels.shape[0] != texts.shape[0]:
                raise ValueError(
                    "clinical soft labels need ReportSupervision.clinical_labels with one row per report and hard "
                    f"negative ({texts.shape[0]}); got {None if labels is None else tuple(labels.shape)}"
                )
            labels = nn.functional.normalize(labels.float().to(texts.device), dim=-1)
            sources.append((labels[:size] @ labels.t(), config.clinical_soft_label_threshold))
        if not sources:
            targets = torch.eye(size, texts.shape[0], device=texts.device)
            return soft_target_infonce_loss(image_embeds, texts, self.logit_scale, targets)
        own = None  # (row, column) of each study's own hard negative: a contradiction, never a target
        if supervision is not None and supervision.negative_rows is not None:
            rows = supervision.negative_rows.to(texts.device)
            own = (rows, size + torch.arange(len(rows), device=texts.device))
        losses = []
        for similarity, threshold in sources:
            targets = dynamic_soft_labels(similarity, threshold)
            if own is not None:
                targets = targets.index_put(own, torch.zeros((), device=targets.device))
            losses.append(soft_target_infonce_loss(image_embeds, texts, self.logit_scale, targets))
        return torch.stack(losses).mean()

    @staticmethod
    def score(features_a: torch.Tensor, features_b: torch.Tensor) -> torch.Tensor:
        """Eq. 4: dot product of L2-normalised features, broadcast over leading dimensions."""
        return (features_a * features_b).sum(dim=-1)

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        modality_ids: torch.Tensor | None = None,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        reports: TextBatch | None = None,
        statements: StatementBatch | None = None,
        priors: PriorBatch | None = None,
        entities: TextBatch | None = None,
        entity_mask: torch.Tensor | None = None,
        candidates: CandidateBatch | None = None,
        progression: ProgressionBatch | None = None,
        report_supervision: ReportSupervision | None = None,
        return_loss: bool = True,
        **kwargs,
    ) -> MedReCoOutput:
        """Three training modes, chosen by the inputs given.

        Alignment (warm-up, `reports`, or CLIP-style their `input_ids` and `attention_mask`): images
        with their reports (tokens, or the pooled outputs of a frozen text backbone, see
        `MedReCoTextEncoder.pool`), symmetric InfoNCE; optionally with
        the entity `statements` mined from those reports, so that the image's feature conditioned on
        an entity is aligned with what its report says about that entity ("No pleural effusion." vs
        "Moderate right pleural effusion."): a whole report's embedding barely moves when one finding
        is negated, a sentence's does. `report_supervision` (CLIP-clinic): hard-negative reports and
        statements, and clinical labels for the soft labels (`report_alignment_loss`).

        Ranking (`candidates`): anchors (`pixel_values`) with one entity each (`entities`; None means
        whole-image; `entity_mask` False rows use the whole-image query), scored against every
        candidate conditioned on every anchor's entity, so all labelled pairs in the batch take part
        in hard-negative mining.

        Progression (`progression`, a `ProgressionBatch`, with `modality_ids`): logits of each pair's
        interval change (and of the pair read backwards with `both_orders`); the loss is the
        cross-entropy of the forward reading when labels are given (TILA's losses are built from
        the two logits by the trainer)."""
        if progression is not None:
            return self.progression_forward(modality_ids, progression, return_loss)
        if pixel_values is None or modality_ids is None:
            raise ValueError("pass pixel_values and modality_ids (or a ProgressionBatch as progression)")
        if candidates is not None:
            entity_embeddings = None if entities is None else self._embed(entities)
            return self.ranking_forward(
                pixel_values, modality_ids, candidates, entity_embeddings, entity_mask, return_loss
            )
        if reports is None and input_ids is not None:
            reports = TextBatch(input_ids, attention_mask)
        if reports is None:
            raise ValueError(
                "pass input_ids or reports (a TextBatch) for alignment, or candidates (a CandidateBatch) for ranking"
            )
        return self.alignment_forward(
            pixel_values, modality_ids, reports, statements, return_loss, priors, report_supervision
        )

    def alignment_forward(
        self,
        pixel_values: torch.Tensor,
        modality_ids: torch.Tensor,
        reports: TextBatch,
        statements: StatementBatch | None = None,
        return_loss: bool = True,
        priors: PriorBatch | None = None,
        supervision: ReportSupervision | None = None,
    ) -> MedReCoOutput:
        """The warm-up: whole-image features against their reports' embeddings (symmetric InfoNCE),
        plus, with `statements`, the entity-statement alignment weighted by `statement_alignment_weight`,
        and with `priors`, the temporal losses (`temporal_alignment_loss`)."""
        vision_output = self.get_image_tokens(pixel_values, modality_ids)
        tokens = self.conditioning_tokens(vision_output)
        image_embeds = self.condition(tokens, modality_ids).features
        if reports.pooled is not None:
            text_embeds = self.text_encoder.project(reports.pooled)
        else:
            text_embeds = self.get_text_embeddings(reports.input_ids, reports.attention_mask)
        loss = self.report_alignment_loss(image_embeds, text_embeds, supervision) if return_loss else None
        statement_loss = statement_texts = None
        if statements is not None and return_loss:
            statement_texts = (self._embed(statements.entities), self._embed(statements.statements))
            entity_embeds, statement_embeds = statement_texts
            negatives = None
            if statements.negatives is not None:
                negatives = (self._embed(statements.negatives), statements.negative_groups)
            statement_loss = self._statement_loss(
                tokens, modality_ids, entity_embeds, statements.pairs, statement_embeds, statements.groups, negatives
            )
            loss = loss + self.config.statement_alignment_weight * statement_loss
        temporal_loss = None
        if priors is not None and return_loss:
            config = self.config
            tamm = bool(config.trend_weight or config.rationale_weight)
            if not tamm or config.temporal_alignment_weight or config.change_aware_weight:
                statement_inputs = None if statements is None else (*statement_texts, statements)
                temporal_loss = self.temporal_alignment_loss(
                    vision_output.last_hidden_state, modality_ids, priors, text_embeds, statement_inputs
                )
            if tamm:
                trend_loss = self.trend_alignment_loss(tokens, image_embeds, text_embeds, modality_ids, priors)
                temporal_loss = trend_loss if temporal_loss is None else temporal_loss + trend_loss
            loss = loss + temporal_loss
        return MedReCoOutput(
            loss=loss,
            image_embeds=image_embeds,
            text_embeds=text_embeds,
            logits_per_image=self.logit_scale.exp() * image_embeds @ text_embeds.t(),
            statement_loss=statement_loss,
            temporal_loss=temporal_loss,
        )

    def temporal_alignment_loss(
        self,
        current_tokens: torch.Tensor,
        modality_ids: torch.Tensor,
        priors: PriorBatch,
        text_embeds: torch.Tensor,
        statements: tuple[torch.Tensor, torch.Tensor, StatementBatch] | None = None,
    ) -> torch.Tensor:
        """BioViL-T's image-report alignment on the prior-fused tokens of the studies that have a
        prior (InfoNCE with their reports, and with their entity statements when given: entity and
        statement embeddings with the `StatementBatch`), weighted by `temporal_alignment_weight`;
        plus TILA's change-aware sigmoid loss on the same studies read backwards (prior as current),
        weighted by `change_aware_weight`. Fewer than two studies with a prior: zero (InfoNCE needs
        a negative)."""
        if self.vision_model.temporal is None:
            raise ValueError("priors were given, but this vision encoder has no prior-image fusion")
        rows = priors.has_prior.to(current_tokens.device).bool().nonzero(as_tuple=True)[0]
        zero = current_tokens.sum() * 0.0
        if len(rows) < 2:
            return zero
        ids = modality_ids.to(current_tokens.device)[rows]
        current = current_tokens[rows]
        prior = self.vision_model.encode(priors.pixel_values.to(current.device)[rows], ids).last_hidden_state
        loss = zero
        weight, change_weight = self.config.temporal_alignment_weight, self.config.change_aware_weight
        if weight:
            fused = self.temporal_tokens(current, prior, ids)
            loss = loss + weight * symmetric_infonce_loss(
                self.condition(fused, ids).features, text_embeds[rows], self.logit_scale
            )
            if statements is not None:
                loss = loss + weight * self.config.statement_alignment_weight * self._temporal_statement_loss(
                    fused, ids, rows, len(priors.has_prior), statements
                )
        if change_weight:
            if priors.changed is None:
                raise ValueError("change_aware_weight needs each study's change label (PriorBatch.changed)")
            inverted = self.condition(self.temporal_tokens(prior, current, ids), ids).features
            changed = priors.changed.to(current.device)[rows]
            loss = loss + change_weight * change_aware_sigmoid_loss(
                inverted, text_embeds[rows], changed, self.change_logit_scale, self.change_logit_bias
            )
        return loss

    def trend_alignment_loss(
        self,
        tokens: torch.Tensor,
        image_embeds: torch.Tensor,
        text_embeds: torch.Tensor,
        modality_ids: torch.Tensor,
        priors: PriorBatch,
    ) -> torch.Tensor:
        """TAMM on the batch's studies with a trend label: the trend classifier on the differences of
        whole-image and of report embeddings (current minus prior), weighted by `trend_weight`, and
        the rationale-conditioned prediction of each study's conditioning tokens from the other's,
        weighted by `rationale_weight` (the predicted side's targets detached: the loss cannot be
        lowered by shrinking every token)."""
        if priors.trend is None:
            raise ValueError("TAMM's losses need each study's trend label (PriorBatch.trend; -1 for none)")
        rows = (priors.trend.to(tokens.device) >= 0).nonzero(as_tuple=True)[0]
        loss = tokens.sum() * 0.0
        if not len(rows):
            return loss
        ids = modality_ids.to(tokens.device)[rows]
        prior_tokens = self.conditioning_tokens(self.get_image_tokens(priors.pixel_values.to(tokens.device)[rows], ids))
        if self.config.trend_weight:
            if priors.prior_reports is None:
                raise ValueError("the trend loss needs the priors' reports (PriorBatch.prior_reports)")
            image_change = image_embeds[rows] - self.condition(prior_tokens, ids).features
            text_change = text_embeds[rows] - self._embed(priors.prior_reports)
            labels = priors.trend.to(tokens.device)[rows]
            loss = loss + self.config.trend_weight * trend_classification_loss(
                self.trend_head(image_change), self.trend_head(text_change), labels
            )
        if self.config.rationale_weight:
            if priors.rationale is None or priors.counter_rationale is None:
                raise ValueError("the rationale loss needs PriorBatch.rationale and counter_rationale")
            current = tokens[rows]
            forward = self.rationale_predictor(prior_tokens, self._embed(priors.rationale))
            backward = self.rationale_predictor(current, self._embed(priors.counter_rationale))
            loss = loss + self.config.rationale_weight * rationale_consistency_loss(
                forward, current.detach(), backward, prior_tokens.detach()
            )
        return loss

    def _temporal_statement_loss(
        self,
        fused: torch.Tensor,
        ids: torch.Tensor,
        rows: torch.Tensor,
        batch_size: int,
        statements: tuple[torch.Tensor, torch.Tensor, StatementBatch],
    ) -> torch.Tensor:
        """Statement alignment of the fused tokens, over the statements of the studies in `rows`
        (of a batch of `batch_size`)."""
        entity_embeds, statement_embeds, statements = statements
        pairs = statements.pairs.to(rows.device)
        # each batch row's place among the fused rows, -1 for a study without a prior
        position = torch.full((batch_size,), -1, dtype=torch.long, device=rows.device)
        position[rows] = torch.arange(len(rows), device=rows.device)
        keep = position[pairs[:, 1]] >= 0
        if keep.sum() < 2:
            return fused.sum() * 0.0
        kept = torch.stack([pairs[keep, 0], position[pairs[keep, 1]]], dim=1)
        groups = None if statements.groups is None else statements.groups.to(rows.device)[keep]
        return self._statement_loss(fused, ids, entity_embeds, kept, statement_embeds[keep], groups)

    def progression_forward(
        self, modality_ids: torch.Tensor, batch: ProgressionBatch, return_loss: bool = True
    ) -> MedReCoOutput:
        """Forward (and, with `both_orders`, reversed) progression logits of a `ProgressionBatch`,
        both orders in one pass through the fusion."""
        pairs = batch.current_tokens.shape[0]
        current, prior = batch.current_tokens, batch.prior_tokens
        ids, entities, has_prior = modality_ids, batch.entity_embeddings, batch.has_prior
        if batch.both_orders:
            current, prior = torch.cat([current, prior]), torch.cat([prior, current])
            ids, entities = torch.cat([ids, ids]), torch.cat([entities, entities])
            has_prior = None if has_prior is None else torch.cat([has_prior, has_prior])
        logits = self.progression_logits(current, prior, ids, entities, has_prior)
        loss = None
        if return_loss and batch.labels is not None:
            loss = nn.functional.cross_entropy(logits[:pairs].float(), batch.labels)
        return MedReCoOutput(
            loss=loss,
            progression_logits=logits[:pairs],
            reversed_progression_logits=logits[pairs:] if batch.both_orders else None,
        )

    def ranking_forward(
        self,
        pixel_values: torch.Tensor,
        modality_ids: torch.Tensor,
        candidates: CandidateBatch,
        entity_embeddings: torch.Tensor | None = None,
        entity_mask: torch.Tensor | None = None,
        return_loss: bool = True,
    ) -> MedReCoOutput:
        """Every candidate scored under every anchor's entity (`entity_embeddings` `(A, d)`; None:
        whole-image), with the configured ranking loss over the labelled pairs of `candidates.relevance`."""
        anchor = self.get_image_features(pixel_values, modality_ids, entity_embeddings, entity_mask).features
        vision_output = self.get_image_tokens(candidates.pixel_values, candidates.modality_ids)
        candidate_tokens = self.conditioning_tokens(vision_output)
        if entity_embeddings is None:
            scored = self.condition(candidate_tokens, candidates.modality_ids).features
            scored = scored[None].expand(anchor.shape[0], -1, -1)
        else:
            scored = self.condition(
                candidate_tokens, candidates.modality_ids, entity_embeddings, entity_mask, pairwise=True
            ).features
        similarity = self.score(anchor[:, None, :], scored)
        loss = self.ranking_loss(similarity, candidates.relevance) if return_loss else None
        return MedReCoOutput(loss=loss, anchor_embeds=anchor, candidate_embeds=scored, similarity=similarity)

    def ranking_loss(self, similarity: torch.Tensor, relevance: torch.Tensor | None = None) -> torch.Tensor:
        """The configured ranking loss (`triplet`, `smooth_ap` or `contrastive`) of an `(A, C)`
        similarity; without `relevance`, candidates are [positives; negatives], one of each per anchor."""
        if relevance is None:
            if similarity.shape[1] != 2 * similarity.shape[0]:
                raise ValueError("without relevance, candidates must be [positives; negatives], one of each per anchor")
            relevance = triplet_relevance(similarity.shape[0], similarity.device)
        if self.config.ranking_loss == "contrastive":
            return contrastive_ranking_loss(similarity, relevance, self.logit_scale)
        if self.config.ranking_loss == "smooth_ap":
            return smooth_ap_loss(similarity, relevance, self.config.smooth_ap_temperature)
        return triplet_loss_with_hard_negatives(
            similarity, relevance, self.config.triplet_margin, self.config.triplet_mining
        )


__all__ = [
    "CandidateBatch",
    "ConditionerOutput",
    "MedReCoConditioner",
    "MedReCoModel",
    "MedReCoOutput",
    "MedReCoProgressionHead",
    "MedReCoTextEncoder",
    "PROGRESSION_CLASSES",
    "PriorBatch",
    "ProgressionBatch",
    "StatementBatch",
    "TextBatch",
]
