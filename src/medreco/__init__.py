"""medreco: comparative reasoning in radiology, on Hugging Face conventions.

Importing the package registers the MedReCo model types with the transformers Auto classes."""

import logging

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
from .modeling import *  # noqa: F403
from .modeling import __all__ as _modeling_all
from .processing import MedReCoImageProcessor, MedReCoProcessor, MedReCoRetrievalProcessor, ReaderOptions, load_image

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "BUNDLED_TEXT_ENCODER",
    "FAMILIES",
    "MedReCoError",
    "MedReCoImageProcessor",
    "MedReCoProcessor",
    "MedReCoRetrievalProcessor",
    "MedicalImageError",
    "ReaderOptions",
    "load_image",
    "PRESETS",
    "__version__",
    "create_config",
    "create_model",
    "create_processor",
    "parameter_summary",
    *_modeling_all,
]
