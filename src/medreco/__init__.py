"""medreco: comparative reasoning in radiology, on Hugging Face conventions.

Importing the package registers the MedReCo model types with the transformers Auto classes. The
names below load from their modules on first use (PEP 562); when the program running is the
`medreco` command line itself, nothing more is imported until a command needs it, so the commands
that read no model (`--help`, `entities`, `inspect`, `info`) start without torch."""

from __future__ import annotations

import logging
import sys
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

from .lazy import lazy_exports

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from .errors import MedicalImageError, MedReCoError
    from .factory import (
        BUNDLED_TEXT_ENCODER,
        FAMILIES,
        PRESETS,
        create_config,
        create_model,
        create_processor,
        parameter_summary,
    )
    from .modeling import (
        AUTO_REGISTRATIONS,
        BIOLORD_2023,
        DEFAULT_MODALITIES,
        CandidateBatch,
        CheckpointMismatchError,
        ConditionerOutput,
        MedReCoConditioner,
        MedReCoConditionerConfig,
        MedReCoConfig,
        MedReCoForConditionalGeneration,
        MedReCoModel,
        MedReCoOutput,
        MedReCoPreTrainedModel,
        MedReCoReranker,
        MedReCoRerankerConfig,
        MedReCoTextEncoder,
        MedReCoVisionConfig,
        MedReCoVisionModel,
        MedReCoVisionOutput,
        MedReCoVLMConfig,
        MedReCoVLMModel,
        MedReCoVLMOutput,
        RerankerOutput,
        StatementBatch,
        TextBatch,
        contrastive_ranking_loss,
        count_active_parameters,
        register_auto_classes,
        select_top_tokens,
        smooth_ap_loss,
        symmetric_infonce_loss,
        triplet_loss_with_hard_negatives,
        triplet_relevance,
    )
    from .processing import (
        MedReCoImageProcessor,
        MedReCoProcessor,
        MedReCoRetrievalProcessor,
        ReaderOptions,
        load_image,
    )

__getattr__, __dir__ = lazy_exports(__name__, __file__)


def _launched_as_the_command_line() -> bool:
    """The `medreco` console script, or `python -m medreco`: the running program is our CLI."""
    if getattr(sys.modules.get("__main__"), "__file__", None) == sys.argv[0] and Path(sys.argv[0]).name == "medreco":
        return True
    arguments = list(getattr(sys, "orig_argv", []))
    return "-m" in arguments and arguments[arguments.index("-m") + 1 : arguments.index("-m") + 2] == ["medreco"]


if not _launched_as_the_command_line():
    # the Auto registrations: importing the models and processors registers them
    import_module(".factory", __name__)

__all__ = [
    "__version__",
    "MedicalImageError",
    "MedReCoError",
    "BUNDLED_TEXT_ENCODER",
    "FAMILIES",
    "PRESETS",
    "create_config",
    "create_model",
    "create_processor",
    "parameter_summary",
    "AUTO_REGISTRATIONS",
    "BIOLORD_2023",
    "DEFAULT_MODALITIES",
    "CandidateBatch",
    "CheckpointMismatchError",
    "ConditionerOutput",
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
    "MedReCoVisionConfig",
    "MedReCoVisionModel",
    "MedReCoVisionOutput",
    "MedReCoVLMConfig",
    "MedReCoVLMModel",
    "MedReCoVLMOutput",
    "RerankerOutput",
    "StatementBatch",
    "TextBatch",
    "contrastive_ranking_loss",
    "count_active_parameters",
    "register_auto_classes",
    "select_top_tokens",
    "smooth_ap_loss",
    "symmetric_infonce_loss",
    "triplet_loss_with_hard_negatives",
    "triplet_relevance",
    "MedReCoImageProcessor",
    "MedReCoProcessor",
    "MedReCoRetrievalProcessor",
    "ReaderOptions",
    "load_image",
]
