"""Configuration of the comparative vision-language model (paper, section 4.5, stage 2)."""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from .configuration_vision import MedReCoVisionConfig

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
    visual token; an image gives `vision_config.grid_size ** 2` tokens (576 at the paper's size)."""

    model_type = "medreco_vlm"
    sub_configs_defaults = {
        "vision_config": MedReCoVisionConfig,
        "text_config": SubConfigSpec(config_class=AutoConfig, model_type="qwen2", init_kwargs=QWEN25_7B_INSTRUCT),
    }

    vision_config: dict | PreTrainedConfig | None = None
    text_config: dict | PreTrainedConfig | None = None
    image_token_id: int = QWEN_IMAGE_PAD_TOKEN_ID
    projector_hidden_act: str = "gelu"
    freeze_vision_tower: bool = True
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.text_config.tie_word_embeddings:
            self.tie_word_embeddings = True

    @property
    def image_seq_length(self) -> int:
        """Placeholder tokens one image takes at the configured image size."""
        return self.vision_config.grid_size**2

    def validate_architecture(self):
        if not 0 <= self.image_token_id < self.text_config.vocab_size:
            raise ValueError(
                f"image_token_id ({self.image_token_id}) is outside the language model's vocabulary "
                f"(vocab_size={self.text_config.vocab_size})"
            )


__all__ = ["MedReCoVLMConfig", "QWEN25_7B_INSTRUCT", "QWEN_IMAGE_PAD_TOKEN_ID"]
