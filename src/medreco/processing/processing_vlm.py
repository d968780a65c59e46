"""`MedReCoProcessor`: tokenizer + `MedReCoImageProcessor` + a chat template, for the comparative VLM.

Each image in a conversation becomes one labelled placeholder block ("Case A: <|vision_start|>
<|image_pad|> x N <|vision_end|>"), N being the number of visual tokens the vision encoder gives
for the preprocessed image. Labels keep only the assistant's answers (and never image tokens or
padding), which is also what TRL's `assistant_only_loss` asks for through `assistant_masks`.

Conversations follow the TRL / transformers message format:
    [{"role": "user", "content": [{"type": "image", "image": "prior/ct"}, {"type": "image", "image": "current/ct"},
                                  {"type": "text", "text": "Has the pleural effusion changed?"}]},
     {"role": "assistant", "content": [{"type": "text", "text": "It has increased."}]}]
An image block may carry `"modality": "chest_ct"`; otherwise `default_modality` applies. For a VLM
with entity tokens (`entity_vocabulary` set), an image block may carry `"entity": ENTITY_ID`, the
finding the question is about: each image's block then holds one more placeholder (its entity
token) and the inputs hold `entity_ids` (the entity's row in the vocabulary, -1 for none)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers.feature_extraction_utils import BatchFeature
from transformers.processing_utils import ProcessorMixin

from ..errors import UnknownEntityError
from .image_processing_medreco import MedReCoImageProcessor, image_processor_kwargs
from .remote_code import ProcessorCodeMixin

IMAGE_TOKEN, VISION_START, VISION_END = "<|image_pad|>", "<|vision_start|>", "<|vision_end|>"
TURN_START, TURN_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [IMAGE_TOKEN, VISION_START, VISION_END, TURN_START, TURN_END]
DEFAULT_SYSTEM_PROMPT = "You are a radiologist. Compare the images and answer the question about the named finding."
IMAGE_LABELS = ("Case A", "Case B", "Case C", "Case D", "Case E", "Case F")  # the template's default labels

# Qwen-style turns; {% generation %} marks what the assistant says (for assistant-token masks).
CHAT_TEMPLATE = (
    "{%- set labels = image_labels if image_labels is defined else "
    "[" + ", ".join(f"'{label}'" for label in IMAGE_LABELS) + "] -%}"
    "{%- set ns = namespace(image=0) -%}"
    "{%- if messages[0]['role'] != 'system' -%}"
    "{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{% generation %}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}{%- else -%}"
    "{%- for block in message['content'] -%}{%- if block['type'] == 'text' -%}{{- block['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>' -}}"
    "{% endgeneration %}"
    "{{- '\\n' -}}"
    "{%- else -%}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}{%- else -%}"
    "{%- for block in message['content'] -%}"
    "{%- if block['type'] == 'image' -%}"
    "{{- labels[ns.image] + ': <|vision_start|><|image_pad|><|vision_end|>\\n' -}}"
    "{%- set ns.image = ns.image + 1 -%}"
    "{%- elif block['type'] == 'text' -%}{{- block['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def template_texts(image_count: int = 2) -> list[str]:
    """The text the chat template writes around a conversation's own: the system prompt, the role
    names and the first `image_count` image labels. A vocabulary learned for the model must cover it
    as well as the questions and answers, or it tokenizes as single characters in every sample."""
    return [
        DEFAULT_SYSTEM_PROMPT,
        "system",
        "user",
        "assistant",
        *(f"{label}:" for label in IMAGE_LABELS[:image_count]),
    ]


class MedReCoProcessor(ProcessorCodeMixin, ProcessorMixin):
    """Prepares conversations with images for [`MedReCoForConditionalGeneration`].

    patch_size: the vision encoder's in-plane patch size (tokens per image = (H/p) * (W/p)).
    default_modality: modality family of images whose block does not name one.
    entity_vocabulary: the entity ids of a VLM with entity tokens (its `config.entity_vocabulary`)."""

    def __init__(
        self,
        image_processor: MedReCoImageProcessor | None = None,
        tokenizer=None,
        chat_template: str | None = None,
        patch_size: int = 20,
        default_modality: str = "chest_xray",
        entity_vocabulary: list[str] | None = None,
        **kwargs,
    ):
        if tokenizer is not None:
            missing = [token for token in SPECIAL_TOKENS if token not in tokenizer.get_vocab()]
            if missing:
                tokenizer.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False)
        self.patch_size = patch_size
        self.default_modality = default_modality
        self.entity_vocabulary = list(entity_vocabulary) if entity_vocabulary else None
        super().__init__(image_processor, tokenizer, chat_template=chat_template or CHAT_TEMPLATE)

    @classmethod
    def from_model_config(
        cls, config: dict, folder: str | Path | None = None, tokenizer=None, **kwargs
    ) -> MedReCoProcessor:
        """The processor a VLM's config implies: the image processor sized to its vision encoder,
        `tokenizer` or the one saved in `folder` or, for a language model built from a preset, word
        pieces sized to it."""
        from .from_config import image_processor_for, vision_config_of, vlm_processor_fields, vlm_tokenizer

        image_processor = image_processor_for(vision_config_of(config), **image_processor_kwargs(kwargs))
        return cls(image_processor, tokenizer or vlm_tokenizer(config, folder), **vlm_processor_fields(config))

    @property
    def image_token_id(self) -> int:
        return self.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)

    @property
    def end_of_turn_id(self) -> int:
        """The token that ends every turn of the chat template: where an answer stops."""
        return self.tokenizer.convert_tokens_to_ids(TURN_END)

    def tokens_per_image(self, pixel_values: torch.Tensor) -> int:
        height, width = pixel_values.shape[-2:]
        return (height // self.patch_size) * (width // self.patch_size) + int(self.entity_vocabulary is not None)

    def entity_id(self, entity: str | None) -> int:
        """The row of `entity` in the entity vocabulary; -1 for None (the whole-image feature)."""
        if entity is None:
            return -1
        if self.entity_vocabulary is None:
            raise ValueError(f"entity {entity!r} given, but this processor's VLM has no entity tokens")
        if entity not in self.entity_vocabulary:
            raise UnknownEntityError(
                f"unknown entity {entity!r}: not in the VLM's entity vocabulary ({len(self.entity_vocabulary)} "
                "entity ids, e.g. " + ", ".join(self.entity_vocabulary[:3]) + ")"
            )
        return self.entity_vocabulary.index(entity)

    def __call__(
        self,
        text: str | Sequence[str] | None = None,
        images: Sequence | None = None,
        modalities: str | Sequence | None = None,
        entities: Sequence | None = None,
        return_tensors: str | None = "pt",
        padding: bool | str = True,
        padding_side: str | None = None,
        truncation: bool = False,
        max_length: int | None = None,
        add_special_tokens: bool = False,
        pad_to_multiple_of: int | None = None,
        **kwargs,
    ) -> BatchFeature:
        """text: one prompt or a batch, each holding one image placeholder per image.
        images: per sample, a list of images (paths, arrays or loaded images), or a flat list for one sample.
        entities: like `modalities`, the entity id each image's entity token is about (None: none).
        Returns input_ids, attention_mask, labels (assistant turns only), assistant_masks,
        pixel_values (all images of the batch, in order), modality_ids, and with an entity vocabulary
        entity_ids."""
        if text is None:
            raise ValueError("MedReCoProcessor needs text (use apply_chat_template for conversations)")
        texts = [text] if isinstance(text, str) else list(text)
        per_sample = self._group_images(images, len(texts))
        per_modality = self._group_modalities(modalities, per_sample)
        data: dict[str, Any] = {}
        expanded = list(texts)
        flat_images = [image for sample in per_sample for image in sample]
        if flat_images:
            flat_modalities = [m for sample in per_modality for m in sample]
            batch = self.image_processor(
                [(image,) for image in flat_images], modalities=flat_modalities, return_tensors="pt"
            )
            data["pixel_values"], data["modality_ids"] = batch["pixel_values"], batch["modality_ids"]
            if self.entity_vocabulary is not None:
                flat_entities = self._flat_entities(entities, per_sample)
                data["entity_ids"] = torch.tensor([self.entity_id(e) for e in flat_entities], dtype=torch.long)
            elif any(e is not None for e in self._flat_entities(entities, per_sample)):
                raise ValueError("entities given, but this processor's VLM has no entity tokens")
            block = IMAGE_TOKEN * self.tokens_per_image(batch["pixel_values"])
            expanded = []
            for sample_text, sample_images in zip(texts, per_sample):
                count = sample_text.count(IMAGE_TOKEN)
                if count != len(sample_images):
                    raise ValueError(f"a prompt has {count} image placeholders for {len(sample_images)} images")
                expanded.append(sample_text.replace(IMAGE_TOKEN, block))
        elif any(IMAGE_TOKEN in t for t in texts):
            raise ValueError("the text holds image placeholders but no images were given")
        encoded = self.tokenizer(
            expanded,
            padding=padding,
            padding_side=padding_side,
            truncation=truncation,
            max_length=max_length,
            add_special_tokens=add_special_tokens,
            pad_to_multiple_of=pad_to_multiple_of,
            return_tensors="pt",
        )
        input_ids, attention_mask = encoded["input_ids"], encoded["attention_mask"]
        answers = self.assistant_mask(input_ids)
        labels = input_ids.masked_fill((answers == 0) | (attention_mask == 0), -100)
        data.update(input_ids=input_ids, attention_mask=attention_mask, labels=labels, assistant_masks=answers)
        return BatchFeature(data=data, tensor_type=return_tensors)

    def assistant_mask(self, input_ids: torch.Tensor) -> torch.Tensor:
        """1 on the tokens of assistant answers (through their end-of-turn token), else 0."""
        start = self.tokenizer.convert_tokens_to_ids(TURN_START)
        end = self.tokenizer.convert_tokens_to_ids(TURN_END)
        assistant = self.tokenizer.encode("assistant\n", add_special_tokens=False)
        mask = torch.zeros_like(input_ids)
        for row, ids in enumerate(input_ids.tolist()):
            inside = False
            for position, token in enumerate(ids):
                if token == start:
                    following = ids[position + 1 : position + 1 + len(assistant)]
                    inside = following == assistant
                    skip_until = position + len(assistant)
                    continue
                if inside and position > skip_until:
                    mask[row, position] = 1
                    if token == end:
                        inside = False
        return mask

    def _group_images(self, images, batch_size: int) -> list[list]:
        if images is None:
            return [[] for _ in range(batch_size)]
        images = list(images)
        nested = all(isinstance(item, (list, tuple)) for item in images) and len(images) == batch_size
        if not nested:
            if batch_size != 1:
                raise ValueError("with several prompts, give images as one list per prompt")
            return [images]
        return [list(sample) for sample in images]

    @staticmethod
    def _flat_entities(entities, per_sample: list[list]) -> list:
        """One entity (or None) per image of the batch, from a list per sample or a flat list."""
        count = sum(len(sample) for sample in per_sample)
        if entities is None:
            return [None] * count
        entities = list(entities)
        if entities and all(isinstance(e, (list, tuple)) for e in entities):
            entities = [e for sample in entities for e in sample]
        if len(entities) != count:
            raise ValueError(f"got {len(entities)} entities for {count} images (give one per image, None for none)")
        return entities

    def _group_modalities(self, modalities, per_sample: list[list]) -> list[list[str]]:
        if modalities is None or isinstance(modalities, str):
            name = modalities or self.default_modality
            return [[name] * len(sample) for sample in per_sample]
        modalities = list(modalities)
        if all(isinstance(m, str) for m in modalities) and len(per_sample) == 1:
            return [modalities]
        return [list(m) for m in modalities]

    def apply_chat_template(
        self,
        conversation: list[dict] | list[list[dict]],
        chat_template: str | None = None,
        tokenize: bool = False,
        return_dict: bool = False,
        return_tensors: str | None = None,
        return_assistant_tokens_mask: bool = False,
        processor_kwargs: dict | None = None,
        **kwargs,
    ):
        """Render conversations with the chat template; with `tokenize=True`, also preprocess their
        images (taken from the image blocks, with their `modality`) and return model inputs."""
        batched = isinstance(conversation[0], (list, tuple))
        conversations = [list(c) for c in conversation] if batched else [list(conversation)]
        template_kwargs = {k: v for k, v in kwargs.items() if k not in ("padding", "truncation", "max_length")}
        prompts = [
            super(MedReCoProcessor, self).apply_chat_template(
                c, chat_template=chat_template, tokenize=False, **template_kwargs
            )
            for c in conversations
        ]
        if not tokenize:
            return prompts if batched else prompts[0]
        images, modalities, entities = [], [], []
        for c in conversations:
            blocks = [b for m in c if not isinstance(m.get("content"), str) for b in m.get("content") or []]
            found = [b for b in blocks if b.get("type") == "image"]
            images.append([b.get("image", b.get("path", b.get("url"))) for b in found])
            modalities.append([b.get("modality") or self.default_modality for b in found])
            entities.append([b.get("entity") for b in found])
        options = dict(processor_kwargs or {})
        options.pop("return_tensors", None)
        output = self(
            text=prompts, images=images, modalities=modalities, entities=entities, return_tensors="pt", **options
        )
        if not return_assistant_tokens_mask:
            output.pop("assistant_masks", None)
        if kwargs.get("add_generation_prompt"):  # a prompt for generate(): no answer to supervise
            output.pop("labels", None)
        if return_tensors is None:  # the transformers convention: lists unless tensors are asked for
            output = BatchFeature({key: value.tolist() for key, value in output.items()})
        return output if return_dict else output["input_ids"]

    def batch_decode(self, *args, **kwargs):
        return self.tokenizer.batch_decode(*args, **kwargs)

    def decode(self, *args, **kwargs):
        return self.tokenizer.decode(*args, **kwargs)

    @property
    def model_input_names(self) -> list[str]:
        names = ["input_ids", "attention_mask", "pixel_values", "modality_ids"]
        return [*names, "entity_ids"] if self.entity_vocabulary is not None else names


def conversation(
    question_text: str,
    modality: str,
    answer: str | None = None,
    images: list | None = None,
    entity: str | None = None,
    image_count: int = 2,
) -> list:
    """A conversation about two images (or `image_count`) in the processor's chat format. Without
    `images` the image blocks are placeholders that TRL's collator fills from the dataset's `images`
    column. `entity`: the entity id the question is about, for a VLM with entity tokens."""
    blocks = (
        [{"type": "image", "modality": modality} for _ in range(image_count)]
        if images is None
        else [{"type": "image", "image": image, "modality": modality} for image in images]
    )
    if entity is not None:
        blocks = [{**block, "entity": entity} for block in blocks]
    messages = [{"role": "user", "content": [*blocks, {"type": "text", "text": question_text}]}]
    if answer is not None:
        messages.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
    return messages


__all__ = [
    "CHAT_TEMPLATE",
    "IMAGE_LABELS",
    "IMAGE_TOKEN",
    "MedReCoProcessor",
    "SPECIAL_TOKENS",
    "conversation",
    "template_texts",
]
