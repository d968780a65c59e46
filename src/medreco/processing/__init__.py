"""From files to model input: readers, geometry, preprocessing, processors, tokenizers, cache, privacy.

The names load on first use, so that reading images (`load_image`, the readers) imports neither
torch nor transformers; the first use of a processor, tokenizer or preprocessing name registers the
processors with the transformers Auto classes."""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .cache import TensorCache, content_digest
    from .geometry import CANONICAL_AXES, ImageGeometry, MedicalImage, to_canonical
    from .image_processing_medreco import MedReCoImageProcessor, PreprocessedImage, write_model_input
    from .preprocessing import DEFAULT_RECIPES, ModalityRecipe, preprocess_image, resample_to_grid
    from .privacy import IDENTIFYING_KEYWORDS, DeidentificationReport, deidentify, deidentify_file, deidentify_tree
    from .processing_retrieval import MedReCoRetrievalProcessor
    from .processing_vlm import CHAT_TEMPLATE, MedReCoProcessor, conversation, template_texts
    from .readers import (
        ReaderOptions,
        list_dicom_series,
        load_image,
        read_dicom_file,
        read_dicom_series,
        read_in_memory,
        read_nifti,
        read_raster,
    )
    from .remote_code import RemoteCodeError, flat_sources
    from .tokenization import train_wordpiece_tokenizer


def register_processors() -> None:
    """Every family reads images with `MedReCoImageProcessor`; the retrieval model pairs it with its
    text tokenizer, the VLM with its chat tokenizer and template."""
    from transformers import AutoImageProcessor, AutoProcessor

    from ..modeling import MedReCoConfig, MedReCoRerankerConfig, MedReCoVisionConfig, MedReCoVLMConfig
    from .image_processing_medreco import MedReCoImageProcessor
    from .processing_retrieval import MedReCoRetrievalProcessor
    from .processing_vlm import MedReCoProcessor

    for config in (MedReCoVisionConfig, MedReCoConfig, MedReCoRerankerConfig, MedReCoVLMConfig):
        AutoImageProcessor.register(config, image_processor_classes={"pil": MedReCoImageProcessor}, exist_ok=True)
    AutoProcessor.register(MedReCoConfig, MedReCoRetrievalProcessor, exist_ok=True)
    AutoProcessor.register(MedReCoVLMConfig, MedReCoProcessor, exist_ok=True)


__getattr__, __dir__ = lazy_exports(
    __name__, __file__, on_first_use=register_processors, light_modules=(".readers", ".geometry", ".privacy")
)

__all__ = [
    "CANONICAL_AXES",
    "DEFAULT_RECIPES",
    "IDENTIFYING_KEYWORDS",
    "CHAT_TEMPLATE",
    "MedReCoImageProcessor",
    "PreprocessedImage",
    "MedReCoProcessor",
    "MedReCoRetrievalProcessor",
    "RemoteCodeError",
    "flat_sources",
    "register_processors",
    "ModalityRecipe",
    "TensorCache",
    "content_digest",
    "conversation",
    "DeidentificationReport",
    "deidentify",
    "deidentify_file",
    "deidentify_tree",
    "preprocess_image",
    "resample_to_grid",
    "ImageGeometry",
    "MedicalImage",
    "ReaderOptions",
    "list_dicom_series",
    "load_image",
    "read_dicom_file",
    "read_dicom_series",
    "read_in_memory",
    "read_nifti",
    "read_raster",
    "to_canonical",
    "template_texts",
    "train_wordpiece_tokenizer",
    "write_model_input",
]
