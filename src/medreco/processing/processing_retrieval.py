"""`MedReCoRetrievalProcessor`: images and texts in, `MedReCoModel` inputs out.

The retrieval model's processor pairs the image processor with its text encoder's tokenizer:
images become `pixel_values` / `modality_ids`, texts (reports, entity names or prompts)
`input_ids` / `attention_mask`. Either side may be given alone."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from transformers.feature_extraction_utils import BatchFeature
from transformers.processing_utils import ProcessorMixin

from .image_processing_medreco import MedReCoImageProcessor, image_processor_kwargs
from .remote_code import ProcessorCodeMixin


class MedReCoRetrievalProcessor(ProcessorCodeMixin, ProcessorMixin):
    """Prepares images and texts for [`MedReCoModel`].

    Example:
    ```python
    >>> processor = AutoProcessor.from_pretrained("medreco-demo/models/stage1/final", trust_remote_code=True)
    >>> images = processor(images=["prior.dcm", "current_series/"], modalities="chest_xray")
    >>> entity = processor(text=["pleural effusion"])
    ```"""

    def __init__(self, image_processor: MedReCoImageProcessor | None = None, tokenizer=None, **kwargs):
        super().__init__(image_processor, tokenizer)

    @classmethod
    def from_model_config(
        cls, config: dict, folder: str | Path | None = None, tokenizer=None, **kwargs
    ) -> MedReCoRetrievalProcessor:
        """The processor a retrieval model's config implies: the image processor sized to its vision
        encoder, `tokenizer` or the one saved in `folder` or of the text encoder the config names."""
        from .from_config import image_processor_for, retrieval_tokenizer, vision_config_of

        image_processor = image_processor_for(vision_config_of(config), **image_processor_kwargs(kwargs))
        return cls(image_processor, tokenizer or retrieval_tokenizer(config, folder))

    def __call__(
        self,
        images: Sequence | None = None,
        text: str | Sequence[str] | None = None,
        modalities: str | Sequence[str] | None = None,
        padding: bool | str = True,
        truncation: bool = True,
        max_length: int | None = None,
        return_tensors: str | None = "pt",
        **kwargs,
    ) -> BatchFeature:
        """images (with their `modalities`, one name or one per image): pixel_values, modality_ids;
        text: input_ids, attention_mask."""
        if images is None and text is None:
            raise ValueError("MedReCoRetrievalProcessor needs images, text or both")
        data = {}
        if images is not None:
            if modalities is None:
                raise ValueError("give the images' modalities (one name, or one per image)")
            batch = self.image_processor(images, modalities=modalities, return_tensors="pt")
            data.update(pixel_values=batch["pixel_values"], modality_ids=batch["modality_ids"])
        if text is not None:
            texts = [text] if isinstance(text, str) else list(text)
            if not texts or any(not str(t).strip() for t in texts):
                raise ValueError("texts must be non-empty strings")
            encoded = self.tokenizer(
                texts, padding=padding, truncation=truncation, max_length=max_length, return_tensors="pt"
            )
            data.update(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"])
        return BatchFeature(data=data, tensor_type=return_tensors)

    @property
    def model_input_names(self) -> list[str]:
        return ["pixel_values", "modality_ids", "input_ids", "attention_mask"]


__all__ = ["MedReCoRetrievalProcessor"]
