"""The comparative vision-language model, MedReCo-VLM (paper, section 4.5, stage 2, Eq. 12-13).

Each image is encoded by the MedReCo vision encoder (frozen by default), its depth-pooled tokens
are mapped into the language model's embedding space by a 2-layer GELU MLP, and each image
placeholder token in the text is replaced by one projected visual token. Any number of images
per sample is allowed; two (prior/current or query/reference) is the comparative case.

With `config.entity_tokens`, each image's block ends with one more token: the stage-1
conditioner's entity-aware feature for the entity the question names (`entity_ids`, one per
image, -1 for none), projected together with that entity's embedding (see `MedReCoVLMConfig`). With
`config.case_embeddings`, a learned vector per image of a sample (first, second, ...) is added to
its block's tokens."""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, fields

import torch
from torch import nn
from transformers import AutoModel
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache
from transformers.generation import GenerationMixin
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_vlm import MedReCoVLMConfig
from .modeling_retrieval import MedReCoConditioner, conditioning_tokens
from .modeling_utils import MedReCoPreTrainedModel
from .modeling_vision import MedReCoVisionModel

# What transformers calls the key-value cache in model outputs and forward arguments: `cache` from
# 5.24 on, `past_key_values` before. Exported models run on the user's transformers, so both count.
CACHE_NAME = "cache" if any(field.name == "cache" for field in fields(CausalLMOutputWithPast)) else "past_key_values"


def cache_argument(past_key_values: Cache | None, kwargs: dict) -> dict:
    """The key-value cache a caller passed, as `past_key_values` or (transformers >= 5.24's
    generation) as `cache` in `kwargs` (removed from it), under the name this transformers takes."""
    cache = kwargs.pop("cache", None)
    return {CACHE_NAME: past_key_values if cache is None else cache}


@dataclass
class MedReCoVLMOutput(CausalLMOutputWithPast):
    """A causal LM output (loss: next-token NLL on answer tokens; the key-value cache under
    `CACHE_NAME`) plus the backbone's `last_hidden_state` and `image_hidden_states`, the projected
    visual tokens."""

    last_hidden_state: torch.Tensor | None = None
    image_hidden_states: torch.Tensor | None = None


class MedReCoMultiModalProjector(nn.Module):
    def __init__(self, config: MedReCoVLMConfig):
        super().__init__()
        self.linear_1 = nn.Linear(config.vision_config.hidden_size, config.text_config.hidden_size)
        self.act = ACT2FN[config.projector_hidden_act]
        self.linear_2 = nn.Linear(config.text_config.hidden_size, config.text_config.hidden_size)

    def forward(self, image_features: torch.Tensor) -> torch.Tensor:
        return self.linear_2(self.act(self.linear_1(image_features)))


class MedReCoEntityProjector(nn.Module):
    """2-layer GELU MLP from [entity-aware feature; entity embedding] to the language model's width:
    the entity's embedding lets it read the feature the way that entity needs."""

    def __init__(self, config: MedReCoVLMConfig):
        super().__init__()
        self.linear_1 = nn.Linear(2 * config.vision_config.hidden_size, config.text_config.hidden_size)
        self.act = ACT2FN[config.projector_hidden_act]
        self.linear_2 = nn.Linear(config.text_config.hidden_size, config.text_config.hidden_size)

    def forward(self, features: torch.Tensor, entity_embeddings: torch.Tensor) -> torch.Tensor:
        return self.linear_2(self.act(self.linear_1(torch.cat([features, entity_embeddings], dim=-1))))


class MedReCoVLMPreTrainedModel(MedReCoPreTrainedModel):
    config: MedReCoVLMConfig
    config_class = MedReCoVLMConfig
    base_model_prefix = "model"
    input_modalities = ("image", "text")
    _skip_keys_device_placement = [CACHE_NAME]


class MedReCoVLMModel(MedReCoVLMPreTrainedModel):
    """Vision encoder + projector + language model backbone, without the LM head."""

    def __init__(self, config: MedReCoVLMConfig):
        super().__init__(config)
        self.vision_tower = MedReCoVisionModel(config.vision_config)
        self.multi_modal_projector = MedReCoMultiModalProjector(config)
        self.language_model = AutoModel.from_config(config.text_config)
        if config.entity_tokens:
            hidden = config.vision_config.hidden_size
            self.conditioner = MedReCoConditioner(config.conditioner_config, hidden, config.vision_config.num_experts)
            self.entity_embeddings = nn.Embedding(len(config.entity_vocabulary), hidden)
            self.entity_projector = MedReCoEntityProjector(config)
        if config.case_embeddings:
            self.case_embeddings = nn.Embedding(config.case_embeddings, config.text_config.hidden_size)
        self.post_init()
        if config.freeze_vision_tower:
            self.vision_tower.requires_grad_(False)
            if config.entity_tokens:
                self.conditioner.requires_grad_(False)
                self.entity_embeddings.requires_grad_(False)

    def get_input_embeddings(self) -> nn.Module:
        return self.language_model.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.language_model.set_input_embeddings(value)

    def get_image_features(
        self, pixel_values: torch.Tensor, modality_ids: torch.Tensor, entity_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Projected visual tokens, `(num_images, tokens_per_image, text_hidden)`; with entity tokens
        the last token of each image is its entity token (`entity_ids`: one row of the entity table
        per image, -1 or None for the whole-image feature). A blind model (`config.blind_images`) sees
        blank images."""
        if self.config.blind_images:
            pixel_values = torch.zeros_like(pixel_values)
        images = pixel_values.shape[0]
        if self.config.entity_tokens:
            if entity_ids is None:
                entity_ids = torch.full((images,), -1, dtype=torch.long, device=pixel_values.device)
            entity_ids = entity_ids.reshape(-1).to(pixel_values.device)
            if entity_ids.numel() != images or int(entity_ids.max()) >= self.entity_embeddings.num_embeddings:
                raise ValueError(
                    f"entity_ids must give one row of the {self.entity_embeddings.num_embeddings}-entity table (or "
                    f"-1) for each of the {images} images; got {entity_ids.tolist()}"
                )
        hidden, conditioned = self._frozen_features(pixel_values, modality_ids, entity_ids)
        features = self.multi_modal_projector(hidden)
        if not self.config.entity_tokens:
            return features
        known = entity_ids >= 0
        embeddings = self.entity_embeddings(entity_ids.clamp(min=0)) * known[:, None]
        entity_token = self.entity_projector(conditioned.to(embeddings.dtype), embeddings)
        return torch.cat([features, entity_token[:, None].to(features.dtype)], dim=1)

    def _vision_features(
        self, pixel_values: torch.Tensor, modality_ids: torch.Tensor, entity_ids: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The vision tower's tokens of each image and, with entity tokens, the conditioner's feature
        of each image for its entity: what the projectors read."""
        vision_output = self.vision_tower(pixel_values, modality_ids)
        if not self.config.entity_tokens:
            return vision_output.last_hidden_state, None
        known = entity_ids >= 0
        embeddings = self.entity_embeddings(entity_ids.clamp(min=0)) * known[:, None]
        tokens = conditioning_tokens(vision_output, self.config.conditioner_token_source)
        conditioned = self.conditioner(tokens, modality_ids.reshape(-1), embeddings, entity_mask=known).features
        return vision_output.last_hidden_state, conditioned

    def _frozen_modules(self) -> list[nn.Module]:
        entity_modules = [self.conditioner, self.entity_embeddings] if self.config.entity_tokens else []
        return [self.vision_tower, *entity_modules]

    def remember_frozen_features(self, enabled: bool = True) -> None:
        """Remember each image's vision-tower tokens and conditioner feature (`_vision_features`) by
        its pixels, modality and entity, while those modules are frozen: a training run or an
        evaluation that sees every image many times computes them once, and each step runs the
        projectors and the language model only. The memory grows with the distinct images seen (on
        their device); `enabled=False` forgets them. The frozen modules must be deterministic (no
        dropout), as they are by default."""
        self._feature_memo = {} if enabled else None

    def _frozen_features(
        self, pixel_values: torch.Tensor, modality_ids: torch.Tensor, entity_ids: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        memo = getattr(self, "_feature_memo", None)
        frozen = memo is not None and not any(
            parameter.requires_grad for module in self._frozen_modules() for parameter in module.parameters()
        )
        if not frozen:
            return self._vision_features(pixel_values, modality_ids, entity_ids)
        pixels = pixel_values.detach().reshape(pixel_values.shape[0], -1).float().cpu().numpy()
        keys = [
            (
                tuple(pixel_values.shape[1:]),
                int(modality_ids.reshape(-1)[i]),
                -2 if entity_ids is None else int(entity_ids[i]),
                hashlib.blake2b(pixels[i].tobytes(), digest_size=16).digest(),
            )
            for i in range(len(pixels))
        ]
        new: dict[tuple, int] = {}  # each image not seen before, at its first place in the batch
        for i, key in enumerate(keys):
            if key not in memo:
                new.setdefault(key, i)
        missing = list(new.values())
        if missing:
            index = torch.tensor(missing, device=pixel_values.device)
            with torch.no_grad():
                hidden, conditioned = self._vision_features(
                    pixel_values[index],
                    modality_ids.reshape(-1)[index],
                    None if entity_ids is None else entity_ids[index],
                )
            for row, i in enumerate(missing):
                memo[keys[i]] = (hidden[row], None if conditioned is None else conditioned[row])
        hidden = torch.stack([memo[key][0] for key in keys])
        conditioned = None if entity_ids is None else torch.stack([memo[key][1] for key in keys])
        return hidden, conditioned

    def get_placeholder_mask(
        self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor, image_features: torch.Tensor
    ) -> torch.Tensor:
        if input_ids is None:
            image_embedding = self.get_input_embeddings()(
                torch.tensor(self.config.image_token_id, dtype=torch.long, device=inputs_embeds.device)
            )
            mask = (inputs_embeds == image_embedding).all(-1)
        else:
            mask = input_ids == self.config.image_token_id
        placeholders = int(mask.sum())
        features = image_features.shape[0] * image_features.shape[1]
        if placeholders != features:
            raise ValueError(
                f"the text holds {placeholders} image placeholder tokens (id {self.config.image_token_id}) but the "
                f"{image_features.shape[0]} image(s) give {features} visual tokens "
                f"({image_features.shape[1]} each); use the processor to expand one placeholder block per image"
            )
        return mask.unsqueeze(-1).expand_as(inputs_embeds)

    def _case_embedding(self, placeholders: torch.Tensor, tokens_per_image: int) -> torch.Tensor:
        """`(batch, length, hidden)`: at each placeholder of a sample's k-th image block, the k-th
        case embedding (none past the last one, nor anywhere else)."""
        block = (placeholders.long().cumsum(dim=1) - 1).div(tokens_per_image, rounding_mode="floor")
        embedded = placeholders & (block < self.config.case_embeddings)
        vectors = self.case_embeddings(block.clamp(0, self.config.case_embeddings - 1))
        return vectors * embedded[..., None].to(vectors.dtype)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        modality_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        entity_ids: torch.Tensor | None = None,
        **kwargs,
    ) -> MedReCoVLMOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = self.get_input_embeddings()(input_ids)
        image_features = None
        if pixel_values is not None:
            if modality_ids is None:
                raise ValueError("modality_ids (one per image) are required with pixel_values")
            image_features = self.get_image_features(pixel_values, modality_ids, entity_ids).to(inputs_embeds.dtype)
            mask = self.get_placeholder_mask(input_ids, inputs_embeds, image_features)
            inputs_embeds = inputs_embeds.masked_scatter(mask, image_features)
            if self.config.case_embeddings:
                inputs_embeds = inputs_embeds + self._case_embedding(mask[..., 0], image_features.shape[1]).to(
                    inputs_embeds.dtype
                )
        cache = cache_argument(past_key_values, kwargs)
        outputs = self.language_model(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=use_cache,
            **cache,
            **kwargs,
        )
        return MedReCoVLMOutput(
            last_hidden_state=outputs.last_hidden_state,
            **{CACHE_NAME: outputs.get(CACHE_NAME)},
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            image_hidden_states=image_features,
        )


class MedReCoForConditionalGeneration(MedReCoVLMPreTrainedModel, GenerationMixin):
    """MedReCo-VLM with its LM head: answers questions about one, two or more images."""

    def __init__(self, config: MedReCoVLMConfig):
        super().__init__(config)
        self.model = MedReCoVLMModel(config)
        self.lm_head = nn.Linear(config.text_config.hidden_size, config.text_config.vocab_size, bias=False)
        self._tied_weights_keys = self._lm_head_tie()
        self.post_init()

    def _lm_head_tie(self) -> dict[str, str]:
        """The LM head's tie to the input embeddings, wherever the language model keeps them
        (`embed_tokens` in Qwen2 and Llama, `wte` in GPT-2, ...)."""
        language_model = self.model.language_model
        embeddings = language_model.get_input_embeddings()
        name = next(name for name, module in language_model.named_modules() if module is embeddings)
        return {"lm_head.weight": f"model.language_model.{name}.weight"}

    def get_input_embeddings(self) -> nn.Module:
        return self.model.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Also maps `AutoModel` (the VLM without its LM head) in `config.json`'s `auto_map`, beside
        `AutoConfig` and `AutoModelForImageTextToText`, as Qwen2-VL folders do."""
        if self._auto_class is not None:
            base = f"{type(self.model).__module__.rsplit('.', 1)[-1]}.{type(self.model).__name__}"
            self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), "AutoModel": base}
        return super().save_pretrained(save_directory, *args, **kwargs)

    @property
    def vision_tower(self) -> MedReCoVisionModel:
        return self.model.vision_tower

    def get_image_features(
        self, pixel_values: torch.Tensor, modality_ids: torch.Tensor, entity_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.model.get_image_features(pixel_values, modality_ids, entity_ids)

    def remember_frozen_features(self, enabled: bool = True) -> None:
        """See `MedReCoVLMModel.remember_frozen_features`."""
        self.model.remember_frozen_features(enabled)

    def load_vision_tower(self, vision_model: MedReCoVisionModel) -> None:
        """Take the stage-1 vision encoder's weights (keeps this model's freezing)."""
        self.model.vision_tower.load_state_dict(vision_model.state_dict(), strict=True)

    def load_conditioner(self, conditioner: MedReCoConditioner, entity_embeddings: torch.Tensor) -> None:
        """Take the stage-1 conditioner's weights and the entity table (`(E, hidden)`: the stage-1
        text encoder's embeddings of the entities of `config.entity_vocabulary`, in its order)."""
        if not self.config.entity_tokens:
            raise ValueError("this VLM has no entity tokens (config.entity_tokens is False)")
        self.model.conditioner.load_state_dict(conditioner.state_dict(), strict=True)
        if tuple(entity_embeddings.shape) != tuple(self.model.entity_embeddings.weight.shape):
            raise ValueError(
                f"entity table of shape {tuple(entity_embeddings.shape)}; this VLM expects "
                f"{tuple(self.model.entity_embeddings.weight.shape)} (one row per entity_vocabulary entry)"
            )
        with torch.no_grad():
            self.model.entity_embeddings.weight.copy_(entity_embeddings)

    def load_language_model(self, name_or_path: str, vocab_size: int | None = None, **kwargs) -> None:
        """Take a pretrained causal LM (e.g. Qwen2.5-7B-Instruct): its backbone and LM head replace
        ours; `kwargs` go to `from_pretrained` (dtype, quantization_config, ...). `vocab_size`
        resizes the embeddings for tokens the processor added."""
        from transformers import AutoModelForCausalLM

        causal = AutoModelForCausalLM.from_pretrained(name_or_path, **kwargs)
        # the base model (what `AutoModel.from_config(text_config)` builds on reload), not its decoder:
        # they differ for e.g. OPT, whose base model wraps the decoder
        self.model.language_model = causal.base_model
        self.lm_head = causal.get_output_embeddings()
        self.config.text_config = causal.config
        self.config.tie_word_embeddings = bool(causal.config.tie_word_embeddings)
        self._tied_weights_keys = self._lm_head_tie()
        self.all_tied_weights_keys = self.get_expanded_tied_weights_keys(all_submodels=False)
        # the language model's own decoding settings (stop tokens, sampling defaults) carry over
        self.generation_config = copy.deepcopy(causal.generation_config)
        if vocab_size is not None and vocab_size != causal.config.vocab_size:
            self.resize_token_embeddings(vocab_size)

    def set_turn_tokens(self, end_of_turn_id: int, pad_token_id: int | None) -> None:
        """Make `generate()` (and pipelines) stop at the end of the assistant's turn: the end-of-turn
        token becomes the first stop token, before any the language model's generation config
        already had, and padding gets its own id."""
        stops = self.generation_config.eos_token_id
        stops = [] if stops is None else [stops] if isinstance(stops, int) else list(stops)
        self.generation_config.eos_token_id = [end_of_turn_id, *(i for i in stops if i != end_of_turn_id)]
        if pad_token_id is not None:
            self.generation_config.pad_token_id = pad_token_id

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        modality_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        entity_ids: torch.Tensor | None = None,
        **kwargs,
    ) -> MedReCoVLMOutput:
        """labels: token ids to predict, -100 where no loss applies. Image placeholder positions
        are always excluded from the loss, whatever the labels hold."""
        outputs = self.model(
            input_ids=input_ids,
            pixel_values=pixel_values,
            modality_ids=modality_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            entity_ids=entity_ids,
            past_key_values=past_key_values,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        if isinstance(logits_to_keep, int) and logits_to_keep > 0:
            hidden_states = hidden_states[:, -logits_to_keep:]
        elif isinstance(logits_to_keep, torch.Tensor):
            hidden_states = hidden_states[:, logits_to_keep]
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            if input_ids is not None:
                labels = labels.masked_fill(input_ids == self.config.image_token_id, -100)
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.text_config.vocab_size)
        return MedReCoVLMOutput(
            loss=loss,
            logits=logits,
            **{CACHE_NAME: outputs.get(CACHE_NAME)},
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            image_hidden_states=outputs.image_hidden_states,
        )


__all__ = [
    "MedReCoEntityProjector",
    "MedReCoForConditionalGeneration",
    "MedReCoVLMModel",
    "MedReCoVLMOutput",
    "MedReCoVLMPreTrainedModel",
]
