"""MedReCo model families as Hugging Face classes, registered with the Auto classes on import.

This folder is self-contained (relative imports only), so `medreco.hub.export_for_remote_code`
can copy it next to a checkpoint for `trust_remote_code=True` loading without medreco installed."""

from transformers import AutoConfig, AutoModel, AutoModelForImageTextToText

from .configuration_reranker import MedReCoRerankerConfig
from .configuration_retrieval import BIOLORD_2023, MedReCoConditionerConfig, MedReCoConfig
from .configuration_vision import DEFAULT_MODALITIES, MedReCoVisionConfig
from .configuration_vlm import MedReCoVLMConfig
from .losses import (
    contrastive_ranking_loss,
    smooth_ap_loss,
    symmetric_infonce_loss,
    triplet_loss_with_hard_negatives,
    triplet_relevance,
)
from .modeling_reranker import MedReCoReranker, RerankerOutput, select_top_tokens
from .modeling_retrieval import ConditionerOutput, MedReCoConditioner, MedReCoModel, MedReCoOutput, MedReCoTextEncoder
from .modeling_utils import CheckpointMismatchError, MedReCoPreTrainedModel, count_active_parameters
from .modeling_vision import MedReCoVisionModel, MedReCoVisionOutput
from .modeling_vlm import MedReCoForConditionalGeneration, MedReCoVLMModel, MedReCoVLMOutput

# Old module paths kept for one release; `export_for_remote_code` leaves them out.
DEPRECATED_MODULES = ("configuration_medreco", "modeling_medreco")

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
    """Make `AutoConfig`/`AutoModel`/`AutoModelForImageTextToText` resolve the medreco model types."""
    for model_type, config_class, models in AUTO_REGISTRATIONS:
        AutoConfig.register(model_type, config_class, exist_ok=True)
        for auto_class, model_class in models:
            auto_class.register(config_class, model_class, exist_ok=True)


register_auto_classes()

__all__ = [
    "AUTO_REGISTRATIONS",
    "BIOLORD_2023",
    "CheckpointMismatchError",
    "DEPRECATED_MODULES",
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
    "MedReCoTextEncoder",
    "MedReCoVLMConfig",
    "MedReCoVLMModel",
    "MedReCoVLMOutput",
    "MedReCoVisionConfig",
    "MedReCoVisionModel",
    "MedReCoVisionOutput",
    "RerankerOutput",
    "count_active_parameters",
    "register_auto_classes",
    "select_top_tokens",
    "contrastive_ranking_loss",
    "smooth_ap_loss",
    "symmetric_infonce_loss",
    "triplet_loss_with_hard_negatives",
    "triplet_relevance",
]
