"""Closed-ended VQA accuracy of the comparative VLM.

The model reads the two images and the question with its lettered options (the stage-2 prompt)
and its answer is the option letter with the highest next-token logit after the assistant turn
opens: no free-text parsing, and every question gets exactly one answer."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..training.stage2 import LETTERS, closed_prompt, conversation


@torch.no_grad()
def choose_option(model, processor, images: Sequence, modality: str, question: str, options: Sequence[str]) -> str:
    """The letter (A, B, ...) the model finds most likely as the first answer token."""
    messages = conversation(closed_prompt(question, list(options)), modality, images=list(images))
    inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
    inputs = {k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask", "pixel_values", "modality_ids")}
    logits = model(**inputs).logits[0, -1]
    letter_ids = [processor.tokenizer.encode(letter, add_special_tokens=False)[0] for letter in LETTERS[: len(options)]]
    return LETTERS[int(torch.argmax(logits[letter_ids]))]


def closed_accuracy(model, processor, rows: Sequence[dict], studies: dict) -> dict:
    """Accuracy over mined VQA rows (study_a, study_b, question, options, answer); `studies` maps
    study ids to objects with `image` and `modality`."""
    model.eval()
    hits = []
    for row in rows:
        a, b = studies[row["study_a"]], studies[row["study_b"]]
        predicted = choose_option(model, processor, [a.image, b.image], a.modality, row["question"], row["options"])
        hits.append(predicted == row["answer"])
    return {"accuracy": sum(hits) / len(hits) if hits else 0.0, "questions": len(hits), "correct": hits}


__all__ = ["choose_option", "closed_accuracy"]
