"""Configurations of the entity-conditioned retrieval model and its conditioner (paper, section 4.5)."""

from __future__ import annotations

from typing import Literal

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from .configuration_vision import MedReCoVisionConfig, check_heads_divide

# The paper's text encoder. BioLORD-2023 is an MPNet sentence encoder; its architecture is the
# default text sub-config, and its weights are loaded by name when a model is created.
BIOLORD_2023 = "FremyCompany/BioLORD-2023"


@strict
class MedReCoConditionerConfig(PreTrainedConfig):
    r"""Settings of the entity conditioner: cross-attention layers in which one query (an entity
    embedding, or a learned CLS when no entity is given) attends to an image's visual tokens."""

    model_type = "medreco_conditioner"
    base_config_key = "conditioner_config"

    num_layers: int = 4
    num_attention_heads: int = 8
    intermediate_size: int = 2048
    hidden_act: str = "gelu"
    use_modality_experts: bool = True
    attention_dropout: float = 0.0
    layer_norm_eps: float = 1e-6
    initializer_range: float = 0.02


@strict
class MedReCoConfig(PreTrainedConfig):
    r"""Settings of [`MedReCoModel`]: vision encoder + text encoder + entity conditioner.

    `text_config` is the architecture of any BERT-style encoder (MPNet for BioLORD-2023 by
    default); `text_model_name_or_path` names the weights that `medreco.create_model` loads into
    it. The shared embedding size is the vision encoder's `hidden_size`.

    Losses (paper, section 4.5): symmetric image-report InfoNCE for warm-up, plus (when the
    trainer passes mined statements) entity-statement alignment weighted by
    `statement_alignment_weight`; entity-conditioned
    triplet loss with `triplet_margin` and in-batch hard negatives (`triplet_mining`), SmoothAP
    (`ranking_loss="smooth_ap"`) as in the published code, or a multi-positive contrastive loss at
    the learnable temperature (`ranking_loss="contrastive"`).

    CLIP-clinic (section 4.2): with `text_soft_label_threshold` and/or `clinical_soft_label_threshold`
    the image-report InfoNCE's one-hot targets become dynamic soft labels from the batch's text
    embeddings and clinical-label vectors (`ReportSupervision`), one loss per source, averaged (the
    paper's equal weights); hard-negative reports and statements, when the trainer passes them,
    join each softmax as extra texts.

    Temporal pretraining (BioViL-T, TILA), on a vision encoder with `num_temporal_layers > 0` when
    the trainer passes each study's prior: `temporal_alignment_weight` adds the same image-report
    InfoNCE (and statement alignment) computed on the prior-fused tokens `P_diff` of the studies
    that have a prior; `change_aware_weight` adds TILA's change-aware sigmoid loss on the pair read
    backwards (it matches its report only when the report describes no change), with a learnable
    temperature and bias of its own.

    TAMM (sections 3.2-3.3), on any vision encoder when the trainer passes each study's prior with its
    trend label and rationales (`PriorBatch`): `trend_weight` adds the trend classifier's loss on the
    whole-image and report embedding differences of the adjacent studies (one head for both);
    `rationale_weight` the bidirectional loss of predicting each study's patch tokens from the other's
    and the rationale (`modeling.trend`).

    `progression_head=True` adds a per-finding interval-change classifier (improving / stable /
    worsening, BioViL-T's progression task) over the static and temporal tokens of a vision encoder
    with `num_temporal_layers > 0`; see `MedReCoProgressionHead`."""

    model_type = "medreco"
    sub_configs_defaults = {
        "vision_config": MedReCoVisionConfig,
        "text_config": SubConfigSpec(config_class=AutoConfig, model_type="mpnet"),
        "conditioner_config": MedReCoConditionerConfig,
    }

    vision_config: dict | PreTrainedConfig | None = None
    text_config: dict | PreTrainedConfig | None = None
    conditioner_config: dict | PreTrainedConfig | None = None
    text_model_name_or_path: str | None = BIOLORD_2023
    freeze_text_encoder: bool = False
    conditioner_token_source: Literal["pooled", "depth"] = "pooled"
    logit_scale_init_value: float = 2.6592
    triplet_margin: float = 0.2
    triplet_mining: Literal["semi_hard", "hardest", "all"] = "semi_hard"
    ranking_loss: Literal["triplet", "smooth_ap", "contrastive"] = "triplet"
    smooth_ap_temperature: float = 0.01
    # weight of entity-statement alignment added to the warm-up InfoNCE (when statements are given)
    statement_alignment_weight: float = 1.0
    # CLIP-clinic's dynamic soft labels for image-report alignment (None: off): the thresholds tau_t
    # on the batch's text-embedding cosines and tau_c on its clinical-label cosines (paper: 0.9, 0.8)
    text_soft_label_threshold: float | None = None
    clinical_soft_label_threshold: float | None = None
    temporal_alignment_weight: float = 0.0  # BioViL-T: image-report alignment on P_diff
    change_aware_weight: float = 0.0  # TILA's W: change-aware sigmoid loss on the reversed pair
    trend_weight: float = 0.0  # TAMM: trend classifier on adjacent studies' embedding differences
    rationale_weight: float = 0.0  # TAMM's lambda_cons: rationale-conditioned prediction of adjacent tokens
    change_logit_scale_init_value: float = 2.3026  # SigLIP's init: t = 10, b = -10
    change_logit_bias_init_value: float = -10.0
    progression_head: bool = False  # per-finding improving / stable / worsening on the prior-fused tokens
    initializer_range: float = 0.02

    @property
    def projection_dim(self) -> int:
        return self.vision_config.hidden_size

    def validate_architecture(self):
        # the conditioner works at the vision encoder's width
        check_heads_divide(self.vision_config.hidden_size, self.conditioner_config.num_attention_heads)
        temporal = {
            "progression_head": self.progression_head,
            "temporal_alignment_weight": self.temporal_alignment_weight,
            "change_aware_weight": self.change_aware_weight,
        }
        for name, value in temporal.items():
            if value and not self.vision_config.num_temporal_layers:
                raise ValueError(f"{name} needs a temporal vision encoder: set vision_config.num_temporal_layers > 0")
        for name in ("text_soft_label_threshold", "clinical_soft_label_threshold"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 1:
                raise ValueError(f"{name} must be in [0, 1) or None; got {value}")
        for name in ("temporal_alignment_weight", "change_aware_weight", "trend_weight", "rationale_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more")


__all__ = ["BIOLORD_2023", "MedReCoConditionerConfig", "MedReCoConfig"]
