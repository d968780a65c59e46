"""MedReCo model families as Hugging Face classes, registered with the Auto classes on import.

This folder is self-contained (relative imports only): `save_pretrained` copies the modules a model
needs next to its weights (transformers' `custom_object_save`), for `trust_remote_code=True` loading
without medreco installed."""

from transformers import AutoConfig, AutoModel, AutoModelForImageTextToText

from .configuration_reranker import MedReCoRerankerConfig
from .configuration_retrieval import BIOLORD_2023, MedReCoConditionerConfig, MedReCoConfig
from .configuration_vision import DEFAULT_MODALITIES, MedReCoVisionConfig
from .configuration_vlm import MedReCoVLMConfig
from .inputs import CandidateBatch, PriorBatch, ProgressionBatch, ReportSupervision, StatementBatch, TextBatch
from .losses import (
    bidirectional_cross_entropy,
    change_aware_sigmoid_loss,
    contrastive_ranking_loss,
    dynamic_soft_labels,
    inversion_aware_probabilities,
    invert_progression,
    pairwise_sigmoid_loss,
    rationale_consistency_loss,
    sigmoid_loss,
    smooth_ap_loss,
    soft_target_infonce_loss,
    symmetric_infonce_loss,
    temporal_consistency_loss,
    trend_classification_loss,
    triplet_loss_with_hard_negatives,
    triplet_relevance,
)
from .modeling_reranker import MedReCoReranker, RerankerOutput, select_top_tokens
from .modeling_retrieval import (
    PROGRESSION_CLASSES,
    ConditionerOutput,
    MedReCoConditioner,
    MedReCoModel,
    MedReCoOutput,
    MedReCoProgressionHead,
)
from .modeling_utils import CheckpointMismatchError, MedReCoPreTrainedModel, count_active_parameters
from .modeling_vision import MedReCoTemporalFusion, MedReCoVisionModel, MedReCoVisionOutput
from .modeling_vlm import MedReCoForConditionalGeneration, MedReCoVLMModel, MedReCoVLMOutput
from .text_encoder import MedReCoTextEncoder
from .trend import RationaleConditionedPredictor, attach_trend_parts

AUTO_REGISTRATIONS = (
    # (model_type, config class, [(auto class, model class), ...])
    ("medreco_vision", MedReCoVisionConfig, [(AutoModel, MedReCoVisionModel)]),
    ("medreco", MedReCoConfig, [(AutoModel, MedReCoModel)]),
    ("medreco_reranker", MedReCoRerankerConfig, [(AutoModel, MedReCoReranker)]),
    (
        "medreco_vlm",
        MedReCoVLMConfig,
        [(AutoModel, MedReCoVLMModel), (AutoModelForImageTextToText, MedReCoForConditionalGeneration)],
    ),
)


def register_auto_classes() -> None:
    """Make `AutoConfig`/`AutoModel`/`AutoModelForImageTextToText` resolve the medreco model types,
    and make `save_pretrained` write this folder's code and an `auto_map` beside the weights, so the
    saved folder loads with `trust_remote_code=True` where medreco is not installed."""
    for model_type, config_class, models in AUTO_REGISTRATIONS:
        AutoConfig.register(model_type, config_class, exist_ok=True)
        config_class.register_for_auto_class()
        for auto_class, model_class in models:
            auto_class.register(config_class, model_class, exist_ok=True)
            model_class.register_for_auto_class(auto_class.__name__)


register_auto_classes()

__all__ = [
    "CandidateBatch",
    "ReportSupervision",
    "StatementBatch",
    "TextBatch",
    "AUTO_REGISTRATIONS",
    "BIOLORD_2023",
    "CheckpointMismatchError",
    "ConditionerOutput",
    "DEFAULT_MODALITIES",
    "MedReCoConditioner",
    "MedReCoConditionerConfig",
    "MedReCoConfig",
    "MedReCoForConditionalGeneration",
    "MedReCoModel",
    "MedReCoOutput",
    "MedReCoPreTrainedModel",
    "MedReCoReranker",
    "MedReCoRerankerConfig",
    "MedReCoProgressionHead",
    "MedReCoTemporalFusion",
    "MedReCoTextEncoder",
    "RationaleConditionedPredictor",
    "attach_trend_parts",
    "MedReCoVLMConfig",
    "MedReCoVLMModel",
    "MedReCoVLMOutput",
    "MedReCoVisionConfig",
    "MedReCoVisionModel",
    "MedReCoVisionOutput",
    "PROGRESSION_CLASSES",
    "PriorBatch",
    "ProgressionBatch",
    "RerankerOutput",
    "count_active_parameters",
    "register_auto_classes",
    "select_top_tokens",
    "bidirectional_cross_entropy",
    "change_aware_sigmoid_loss",
    "contrastive_ranking_loss",
    "inversion_aware_probabilities",
    "invert_progression",
    "pairwise_sigmoid_loss",
    "rationale_consistency_loss",
    "sigmoid_loss",
    "temporal_consistency_loss",
    "trend_classification_loss",
    "dynamic_soft_labels",
    "smooth_ap_loss",
    "soft_target_infonce_loss",
    "symmetric_infonce_loss",
    "triplet_loss_with_hard_negatives",
    "triplet_relevance",
]
