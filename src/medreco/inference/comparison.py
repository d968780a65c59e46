"""Comparative interpretation: the stage-2 VLM answering a question about two studies."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..data.reports.decomposition import QuestionEntityFinder
from ..hub.download import model_folder
from ..processing import conversation
from .device import InferenceDevice

logger = logging.getLogger(__name__)


class ComparativeReader:
    """Loads a saved MedReCo VLM (a folder or Hub repository) with its processor, on `placement`'s
    device in its precision (or spread by its device map); `answer(a, b, question)` returns text.

    Example:
    ```python
    >>> reader = ComparativeReader.from_pretrained("runs/stage2/final")
    >>> reader.answer("prior.nii.gz", "current.nii.gz", "Has the pleural effusion changed?", modality="chest_ct",
    ...               labels=("Prior", "Current"))
    ```"""

    def __init__(self, model, processor, placement: InferenceDevice | None = None):
        """`model` moves to `placement`'s device, unless a device map has spread it (`hf_device_map`)."""
        self.placement = placement or InferenceDevice()
        if getattr(model, "hf_device_map", None) is None:
            model = model.to(self.placement.torch_device)
        self.model = model.eval()
        self.processor = processor
        self.entity_finder = QuestionEntityFinder() if getattr(processor, "entity_vocabulary", None) else None

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, placement: InferenceDevice | None = None) -> ComparativeReader:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        placement = placement or InferenceDevice()
        folder = model_folder(name_or_path)
        if not (folder / "config.json").exists():
            raise FileNotFoundError(f"{folder}: not a saved MedReCo VLM (no config.json)")
        model = AutoModelForImageTextToText.from_pretrained(folder, **placement.vlm_loading())
        return cls(model, AutoProcessor.from_pretrained(folder), placement)

    @torch.no_grad()
    def answer(
        self,
        image_a,
        image_b,
        question: str,
        modality: str = "chest_xray",
        labels: tuple[str, str] = ("Case A", "Case B"),
        max_new_tokens: int = 32,
        entity: str | None = None,
    ) -> str:
        """Greedy answer to `question` about two images of one modality (paths, arrays or loaded
        images). For a VLM with entity tokens, `entity` names the finding the question is about
        (found in the question when not given; see `QuestionEntityFinder`)."""
        if not question.strip():
            raise ValueError("the question is empty")
        if self.entity_finder is not None:  # without entity tokens, the processor refuses an entity
            entity = self.entity_finder.find(question, modality, entity)
            logger.debug("entity token: %s", entity or "none (whole image)")
        inputs = self.processor.apply_chat_template(
            conversation(question, modality, images=[image_a, image_b], entity=entity),
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
            image_labels=list(labels),
        )
        inputs = {k: v.to(self.model.device) for k, v in inputs.items() if k in self.processor.model_input_names}
        tokenizer = self.processor.tokenizer
        end_of_turn = self.processor.end_of_turn_id  # answers end their turn
        # An answer is text: at least one token before the turn ends, and never a special token
        # (image placeholders, entity tokens, padding), which decoding would drop silently.
        never = sorted(set(tokenizer.all_special_ids) - {end_of_turn})
        with self.placement.autocast():
            generated = self.model.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                min_new_tokens=1,
                suppress_tokens=never or None,
                do_sample=False,
                eos_token_id=end_of_turn,
            )
        new_tokens = generated[0, inputs["input_ids"].shape[1] :]
        answer = self.processor.decode(new_tokens, skip_special_tokens=True).strip()
        if not answer:
            logger.warning("the model's answer is blank (%d whitespace tokens): is it trained?", len(new_tokens))
        return answer


__all__ = ["ComparativeReader"]
