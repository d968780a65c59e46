"""Configuration of the comparative vision-language model (paper, section 4.5, stage 2)."""

from __future__ import annotations

from typing import Literal

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from .configuration_retrieval import MedReCoConditionerConfig
from .configuration_vision import MedReCoVisionConfig, check_heads_divide

# Qwen2.5-7B-Instruct, the paper's language model.
QWEN25_7B_INSTRUCT = {
    "vocab_size": 152064,
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    "tie_word_embeddings": False,
}
QWEN_IMAGE_PAD_TOKEN_ID = 151655  # "<|image_pad|>" in the Qwen2.5 tokenizer


@strict
class MedReCoVLMConfig(PreTrainedConfig):
    r"""Settings of [`MedReCoForConditionalGeneration`]: MedReCo vision encoder, a 2-layer GELU MLP
    projector, and any causal language model given by `text_config` (Qwen2 by default).

    Every image placeholder token (`image_token_id`) in the text is replaced by one projected
    visual token; an image gives `vision_config.grid_size ** 2` tokens (576 at the paper's size).

    With `entity_tokens`, each image also gets one entity token: the stage-1 conditioner's
    entity-aware feature of the image for the entity the question is about (a row of the frozen
    entity table, `entity_vocabulary` holding the entity ids; the whole-image feature when the
    question names none), projected with that entity's embedding into the language model's space.
    This is the reranker's input (paper, Eq. 7-11) given to the language model; the paper's VLM
    reads the visual tokens only. A language model trained from scratch learns which of the visual
    tokens answer a question about a named finding slowly; with the finding's own feature it does not
    have to.

    `case_embeddings` (n > 0) adds a learned vector to every token of a sample's first, second, ...
    n-th image (Case A, Case B; prior, current): otherwise the language model tells two image blocks
    apart only by their positions, which one trained from scratch learns slowly. 0 (the paper's VLM):
    none.
    `blind_images` replaces every image by a blank before the vision tower: the blind baseline of the
    ablations (same architecture, tokens and training; no visual information reaches the model)."""

    model_type = "medreco_vlm"
    sub_configs_defaults = {
        "vision_config": MedReCoVisionConfig,
        "text_config": SubConfigSpec(config_class=AutoConfig, model_type="qwen2", init_kwargs=QWEN25_7B_INSTRUCT),
        "conditioner_config": MedReCoConditionerConfig,
    }

    vision_config: dict | PreTrainedConfig | None = None
    text_config: dict | PreTrainedConfig | None = None
    conditioner_config: dict | PreTrainedConfig | None = None
    image_token_id: int = QWEN_IMAGE_PAD_TOKEN_ID
    projector_hidden_act: str = "gelu"
    freeze_vision_tower: bool = True  # the conditioner and the entity table too, with entity_tokens
    entity_tokens: bool = False
    case_embeddings: int = 0
    blind_images: bool = False
    entity_vocabulary: list[str] | None = None
    conditioner_token_source: Literal["pooled", "depth"] = "pooled"
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.text_config.tie_word_embeddings:
            self.tie_word_embeddings = True

    @property
    def image_seq_length(self) -> int:
        """Placeholder tokens one image takes at the configured image size."""
        return self.vision_config.grid_size**2 + int(self.entity_tokens)

    def validate_architecture(self):
        if not 0 <= self.image_token_id < self.text_config.vocab_size:
            raise ValueError(
                f"image_token_id ({self.image_token_id}) is outside the language model's vocabulary "
                f"(vocab_size={self.text_config.vocab_size})"
            )
        if self.case_embeddings < 0:
            raise ValueError(
                f"case_embeddings must be 0 (none) or the number of images embedded; got {self.case_embeddings}"
            )
        if self.entity_tokens:
            if not self.entity_vocabulary:
                raise ValueError("entity_tokens needs an entity_vocabulary (the entity ids of the entity table)")
            check_heads_divide(self.vision_config.hidden_size, self.conditioner_config.num_attention_heads)


__all__ = ["MedReCoVLMConfig", "QWEN25_7B_INSTRUCT", "QWEN_IMAGE_PAD_TOKEN_ID"]
