"""ComparativeReader: answers are text, never a special token."""

from __future__ import annotations

from medreco.training.stage2 import Stage2Trainer
from toy_training import stage2_config


def test_an_answer_is_text_even_from_a_model_that_would_end_its_turn_at_once(stage1_run, toy, tmp_path, capsys):
    from medreco.inference import ComparativeReader

    _, stage1_out, _, _ = stage1_run
    trainer = Stage2Trainer(stage2_config(toy, stage1_out / "final", tmp_path))
    model, processor = trainer.model.eval(), trainer.processor
    tokenizer = processor.tokenizer
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    special = set(tokenizer.all_special_ids)
    assert end_of_turn in special and processor.image_token_id in special

    def prefer_special_tokens(module, inputs, logits):  # a barely trained model's worst case
        logits = logits.clone()
        logits[..., sorted(special)] += 100.0
        logits[..., end_of_turn] += 100.0
        return logits

    model.get_output_embeddings().register_forward_hook(prefer_special_tokens)
    generated = []
    generate = model.generate

    def recording_generate(**inputs):
        output = generate(**inputs)
        generated.append(output[0, inputs["input_ids"].shape[1] :])
        return output

    model.generate = recording_generate
    studies = trainer.data.studies
    first, second = sorted(studies)[:2]
    reader = ComparativeReader(model, processor)
    answer = reader.answer(studies[first].image, studies[second].image, "Any change?", max_new_tokens=3)
    new_tokens = generated[0].tolist()
    text_tokens = new_tokens[:-1] if new_tokens[-1] == end_of_turn else new_tokens
    assert text_tokens and not set(text_tokens) & special  # one token at least, and never a placeholder
    assert answer == tokenizer.decode(text_tokens).strip() != ""
