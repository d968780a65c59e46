import pytest
import torch
from huggingface_hub.errors import StrictDataclassClassValidationError
from transformers import AutoModel, AutoModelForImageTextToText

import medreco
from conftest import example_inputs, tiny_model
from test_modeling_common import ModelTesterMixin, recorded_attention

BOS, EOS, CASE_A, CASE_B, QUESTION, ANSWER_A, ANSWER_B = 1, 2, 10, 11, 12, 20, 21


class TestVLM(ModelTesterMixin):
    """Samples are comparisons: two images each, their placeholder blocks inside the text."""

    family = "vlm"
    model_class = medreco.MedReCoForConditionalGeneration
    model_type = "medreco_vlm"
    auto_classes = {AutoModel: medreco.MedReCoVLMModel, AutoModelForImageTextToText: model_class}
    input_kinds = ("2d", "3d")
    frozen_parameter_prefixes = ("model.vision_tower.",)  # frozen by default (freeze_vision_tower)
    causal_attention_prefixes = ("model.language_model.",)

    def prepare_inputs(self, model, kind, batch_size):
        config = model.config
        generator = torch.Generator().manual_seed(1)
        # text tokens anywhere in the vocabulary but the image placeholder (3)
        text = torch.randint(4, config.text_config.vocab_size, (batch_size, 5), generator=generator)
        block = torch.full((batch_size, config.image_seq_length), config.image_token_id)
        input_ids = torch.cat([text[:, :2], block, text[:, 2:3], block, text[:, 3:]], dim=1)
        depth = 1 if kind == "2d" else 4
        return {
            "input_ids": input_ids,
            "pixel_values": torch.rand(2 * batch_size, 1, depth, 40, 40, generator=generator),
            "modality_ids": self.modality_ids(2 * batch_size),
        }

    def sample(self, inputs, index):
        images = slice(2 * index, 2 * index + 2)
        return {
            name: value[index : index + 1] if name in ("input_ids", "labels") else value[images]
            for name, value in inputs.items()
        }

    def per_sample_outputs(self, outputs, batch_size):
        images = outputs.image_hidden_states
        per_sample = {"image_hidden_states": images.reshape(batch_size, 2, *images.shape[1:])}
        for name in ("logits", "last_hidden_state"):  # the full model's, or the base model's
            if outputs.get(name) is not None:
                per_sample[name] = outputs[name]
        return per_sample

    def training_inputs(self, model, inputs):
        # every text position is a target; the model itself leaves out the image placeholders
        return {**inputs, "labels": inputs["input_ids"].clone()}

    def attention_maps(self, model, inputs):
        """The vision tower's (and conditioner's) maps are recorded during the forward; the language
        model returns its own with output_attentions=True, which, as everywhere in transformers 5,
        needs eager attention (under SDPA `attentions` is an empty tuple)."""
        model.set_attn_implementation("eager")
        with recorded_attention(model) as maps:
            outputs = model(**inputs, output_attentions=True)
        return {**maps, **{f"model.language_model.layers.{i}": value for i, value in enumerate(outputs.attentions)}}

    def expected_attention_shapes(self, model, kind, batch_size):
        images, depth = 2 * batch_size, 1 if kind == "2d" else 2
        length = 2 * model.config.image_seq_length + 5
        shapes = {f"model.vision_tower.spatial_layers.{i}.attention": (images * depth, 4, 16, 16) for i in range(2)}
        if kind == "3d":
            shapes["model.vision_tower.depth_layers.0.attention"] = (images * 16, 4, 2, 2)
        shapes.update({f"model.language_model.layers.{i}": (batch_size, 4, length, length) for i in range(2)})
        return shapes

    def test_left_padded_batch_equals_each_sample_alone(self):
        """Comparisons of different lengths batch only with padding: left padding (as for generation)
        with its attention mask changes no real position's logits."""
        model = self.get_model()
        inputs = self.prepare_inputs(model, "2d", 3)
        texts = [torch.cat([ids, torch.arange(20, 20 + extra)]) for ids, extra in zip(inputs["input_ids"], (0, 2, 4))]
        width = max(len(text) for text in texts)
        input_ids = torch.stack([torch.cat([torch.zeros(width - len(text), dtype=torch.long), text]) for text in texts])
        attention_mask = torch.stack([torch.arange(width) >= width - len(text) for text in texts]).long()
        with torch.no_grad():
            batched = model(**dict(inputs, input_ids=input_ids, attention_mask=attention_mask)).logits
            for i, text in enumerate(texts):
                alone = model(**dict(self.sample(inputs, i), input_ids=text[None])).logits
                torch.testing.assert_close(batched[i, width - len(text) :], alone[0], atol=1e-5, rtol=1e-5)


ENTITIES = ["cxr/abnormal/upper-square", "cxr/abnormal/lower-square", "cxr/abnormal/unused"]


class TestEntityTokenVLM(TestVLM):
    """The battery again with an entity token closing each image block: images ask about the first
    or second entity, or (-1) none; the stage-1 conditioner and the entity table stay frozen."""

    overrides = {"entity_tokens": True, "entity_vocabulary": ENTITIES}
    frozen_parameter_prefixes = ("model.vision_tower.", "model.conditioner.", "model.entity_embeddings.")

    def prepare_inputs(self, model, kind, batch_size):
        inputs = super().prepare_inputs(model, kind, batch_size)
        return {**inputs, "entity_ids": torch.arange(2 * batch_size) % 3 - 1}

    def expected_attention_shapes(self, model, kind, batch_size):
        shapes = super().expected_attention_shapes(model, kind, batch_size)
        # the conditioner: one query per image over its 16 depth-pooled tokens
        shapes.update({f"model.conditioner.layers.{i}": (1, 2 * batch_size, 16) for i in range(2)})
        return shapes


class TestCaseEmbeddingVLM(TestVLM):
    """The battery again with a learned embedding marking each sample's first and second image."""

    overrides = {"case_embeddings": 2}


def test_case_embeddings_mark_each_image_block_by_its_place_and_nothing_else():
    model = medreco.create_model("vlm", "tiny", case_embeddings=2).eval()
    config = model.config
    block = [config.image_token_id] * config.image_seq_length
    input_ids = torch.tensor([[5, *block, 6, *block, 7, *block, 8]] * 2)
    inputs = {
        "input_ids": input_ids,
        "pixel_values": torch.rand(6, 1, 1, 40, 40, generator=torch.Generator().manual_seed(0)),
        "modality_ids": torch.zeros(6, dtype=torch.long),
    }
    seen = []
    hook = model.model.language_model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["inputs_embeds"].detach().clone()), with_kwargs=True
    )
    with torch.no_grad():
        model(**inputs)
        config.case_embeddings = 0
        model(**inputs)
    hook.remove()
    added = seen[0] - seen[1]
    weights = model.model.case_embeddings.weight.detach()
    starts = [1 + k * (len(block) + 1) for k in range(3)]
    expected = torch.zeros_like(added)
    for k, start in enumerate(starts[:2]):  # the third image is past the last embedding: none
        expected[:, start : start + len(block)] = weights[k]
    torch.testing.assert_close(added, expected)
    assert weights.abs().sum() > 0


def test_case_embeddings_cannot_be_negative():
    with pytest.raises((ValueError, StrictDataclassClassValidationError), match="case_embeddings"):
        medreco.create_model("vlm", "tiny", case_embeddings=-1)


def comparison_prompt(config) -> list[int]:
    """[BOS, "Case A:", <image x N>, "Case B:", <image x N>, "Which case has the bright square?"]"""
    image = [config.image_token_id] * config.image_seq_length
    return [BOS, CASE_A, *image, CASE_B, *image, QUESTION]


def test_projector_is_two_layer_gelu_and_the_vision_tower_can_be_unfrozen():
    # frozen by default: TestVLM's frozen_parameter_prefixes
    model = tiny_model("vlm")
    projector = model.model.multi_modal_projector
    assert projector.linear_1.out_features == projector.linear_2.in_features == model.config.text_config.hidden_size
    unfrozen = medreco.create_model("vlm", "tiny", freeze_vision_tower=False)
    assert all(p.requires_grad for p in unfrozen.vision_tower.parameters())


def test_placeholder_count_must_match_images():
    model = tiny_model("vlm")
    inputs = example_inputs(model)
    with pytest.raises(ValueError, match="image placeholder tokens"):
        model(
            input_ids=inputs["input_ids"][:, :-5],
            pixel_values=inputs["pixel_values"][:1],
            modality_ids=inputs["modality_ids"][:1],
        )
    with pytest.raises(ValueError, match="modality_ids"):
        model(input_ids=inputs["input_ids"], pixel_values=inputs["pixel_values"])


def test_image_features_replace_placeholders():
    model = tiny_model("vlm")
    inputs = example_inputs(model)
    out = model(**inputs)
    assert out.image_hidden_states.shape == (2, model.config.image_seq_length, model.config.text_config.hidden_size)
    other_pixels = model(**dict(inputs, pixel_values=torch.rand_like(inputs["pixel_values"])))
    assert not torch.allclose(out.logits[:, -1], other_pixels.logits[:, -1])


def test_a_blind_vlm_sees_no_image_and_stays_blind_after_a_round_trip(tmp_path):
    """`blind_images` (the blind baseline): any pixels give the answer blank images give."""
    model = tiny_model("vlm", blind_images=True)
    inputs = example_inputs(model)
    out = model(**inputs)
    for pixels in (torch.rand_like(inputs["pixel_values"]), torch.zeros_like(inputs["pixel_values"])):
        torch.testing.assert_close(model(**dict(inputs, pixel_values=pixels)).logits, out.logits)
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForImageTextToText.from_pretrained(tmp_path).eval()
    assert reloaded.config.blind_images
    torch.testing.assert_close(reloaded(**inputs).logits, out.logits)


def test_image_positions_never_contribute_to_the_loss():
    model = tiny_model("vlm")
    inputs = example_inputs(model)
    ids = inputs["input_ids"]
    everything = model(**inputs, labels=ids.clone()).loss
    masked_labels = ids.masked_fill(ids == model.config.image_token_id, -100)
    assert everything.item() == pytest.approx(model(**inputs, labels=masked_labels).loss.item(), rel=1e-6)


def test_generate_with_two_images_and_kv_cache():
    model = tiny_model("vlm")
    inputs = example_inputs(model)
    cached = model.generate(**inputs, max_new_tokens=6, do_sample=False, use_cache=True)
    uncached = model.generate(**inputs, max_new_tokens=6, do_sample=False, use_cache=False)
    assert cached.shape == (1, inputs["input_ids"].shape[1] + 6)
    torch.testing.assert_close(cached, uncached)


def test_any_causal_lm_config_works():
    llama = {
        "model_type": "llama",
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
    }
    model = medreco.create_model("vlm", "tiny", text_config=llama).eval()
    out = model(**example_inputs(model))
    assert out.logits.shape[-1] == 64


GPT2 = {"model_type": "gpt2", "vocab_size": 64, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 256}


@pytest.mark.parametrize("tied", [True, False])
def test_a_gpt2_language_model_builds_trains_one_step_and_generates(tmp_path, tied):
    """Not only Qwen2 and Llama: GPT-2 keeps its input embeddings in `wte` and has no `.model`."""
    model = medreco.create_model(
        "vlm", "tiny", text_config={**GPT2, "tie_word_embeddings": tied}, image_token_id=3
    ).train()
    assert type(model.model.language_model).__name__ == "GPT2Model"
    assert (model.lm_head.weight is model.get_input_embeddings().weight) == tied
    inputs = example_inputs(model)
    before = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    loss = model(**inputs, labels=inputs["input_ids"]).loss
    loss.backward()
    torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1).step()
    assert torch.isfinite(loss)
    assert not torch.equal(before["model.language_model.wte.weight"], model.get_input_embeddings().weight)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForImageTextToText.from_pretrained(tmp_path).eval()
    assert (loaded.lm_head.weight is loaded.get_input_embeddings().weight) == tied
    torch.testing.assert_close(loaded.lm_head.weight, model.lm_head.weight)
    generated = loaded.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert generated.shape == (1, inputs["input_ids"].shape[1] + 4)


def test_a_pretrained_causal_lm_brings_its_generation_config_and_answers_stop_at_the_end_of_turn(tmp_path):
    """`load_language_model` takes any AutoModelForCausalLM (here a saved GPT-2) with its decoding
    settings; `set_turn_tokens` makes the end-of-turn token stop `generate()` without being passed."""
    from transformers import GPT2Config, GPT2LMHeadModel

    language_model = GPT2LMHeadModel(GPT2Config(**{k: v for k, v in GPT2.items() if k != "model_type"}))
    language_model.generation_config.eos_token_id = 5
    language_model.generation_config.repetition_penalty = 1.3
    language_model.save_pretrained(tmp_path / "lm")
    model = tiny_model("vlm", image_token_id=3)
    model.load_language_model(str(tmp_path / "lm"))
    assert type(model.model.language_model).__name__ == "GPT2Model"
    assert model.lm_head.weight is model.get_input_embeddings().weight  # GPT-2 ties them
    assert model.generation_config.repetition_penalty == 1.3
    end_of_turn = 9
    model.set_turn_tokens(end_of_turn, pad_token_id=0)
    assert model.generation_config.eos_token_id == [end_of_turn, 5] and model.generation_config.pad_token_id == 0

    calls = []

    def end_the_turn_after_two_tokens(module, args, logits):  # one call per generated token
        calls.append(len(calls))
        logits = logits.clone()
        logits[..., [end_of_turn, 5]] = -1e4  # no stop before the third token, then the end of turn
        if len(calls) == 3:
            logits[..., end_of_turn] = 1e4
        return logits

    model.get_output_embeddings().register_forward_hook(end_the_turn_after_two_tokens)
    inputs = example_inputs(model)
    generated = model.generate(**inputs, max_new_tokens=12, do_sample=False)[0, inputs["input_ids"].shape[1] :]
    assert generated.tolist()[-1] == end_of_turn and len(generated) == 3
    model.save_pretrained(tmp_path / "vlm")
    saved = AutoModelForImageTextToText.from_pretrained(tmp_path / "vlm").generation_config
    assert saved.eos_token_id == [end_of_turn, 5] and saved.pad_token_id == 0 and saved.repetition_penalty == 1.3


def test_a_language_model_whose_decoder_is_not_its_base_model_reloads(tmp_path):
    """OPT's base model wraps its decoder: the VLM keeps the base model, which is what it builds on reload."""
    from transformers import OPTConfig, OPTForCausalLM

    config = OPTConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, ffn_dim=64, num_attention_heads=4, word_embed_proj_dim=32
    )
    OPTForCausalLM(config).save_pretrained(tmp_path / "opt")
    model = tiny_model("vlm", image_token_id=3)
    model.load_language_model(str(tmp_path / "opt"))
    model.save_pretrained(tmp_path / "vlm")
    loaded = AutoModelForImageTextToText.from_pretrained(tmp_path / "vlm").eval()
    inputs = example_inputs(model)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**inputs).logits, model.eval()(**inputs).logits)


def test_paper_size_config():
    config = medreco.create_config("vlm", "paper")
    assert config.image_seq_length == 576
    assert config.text_config.model_type == "qwen2" and config.text_config.hidden_size == 3584
    with torch.device("meta"):
        model = medreco.MedReCoForConditionalGeneration(config)
    assert model.model.multi_modal_projector.linear_1.in_features == 512


def _bright_square_batch(config, n: int, generator: torch.Generator):
    """Two images per sample; one holds a bright square. The answer names which one."""
    which = torch.randint(0, 2, (n,), generator=generator)
    images = torch.rand(n, 2, 1, 1, 40, 40, generator=generator) * 0.2
    for i in range(n):
        images[i, which[i], :, :, 10:30, 10:30] += 0.8
    prompt = comparison_prompt(config)
    input_ids = torch.tensor([[*prompt, ANSWER_A if w == 0 else ANSWER_B, EOS] for w in which])
    labels = input_ids.clone()
    labels[:, : len(prompt)] = -100  # loss on the answer only
    return {
        "input_ids": input_ids,
        "labels": labels,
        "pixel_values": images.reshape(2 * n, 1, 1, 40, 40),
        "modality_ids": torch.zeros(2 * n, dtype=torch.long),
    }, which


def test_learns_which_of_two_images_holds_the_bright_square():
    model = medreco.create_model("vlm", "tiny")
    generator = torch.Generator().manual_seed(0)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=3e-3)
    losses = []
    model.train()
    for _ in range(80):
        batch, _ = _bright_square_batch(model.config, 16, generator)
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-10:]) / 10 < 0.3 * sum(losses[:10]) / 10

    model.eval()
    batch, which = _bright_square_batch(model.config, 32, generator)
    prompt_length = len(comparison_prompt(model.config))
    generated = model.generate(
        input_ids=batch["input_ids"][:, :prompt_length],
        pixel_values=batch["pixel_values"],
        modality_ids=batch["modality_ids"],
        max_new_tokens=1,
        do_sample=False,
    )[:, -1]
    expected = torch.where(which == 0, ANSWER_A, ANSWER_B)
    assert (generated == expected).float().mean().item() >= 0.9


def entity_vlm(**overrides):
    return medreco.create_model("vlm", "tiny", entity_tokens=True, entity_vocabulary=ENTITIES, **overrides)


def test_entity_tokens_end_each_image_block_and_follow_the_entity():
    # what is frozen, and the round trip of the entity vocabulary: TestEntityTokenVLM
    model = entity_vlm().eval()
    grid = model.config.vision_config.grid_size
    assert model.config.image_seq_length == grid**2 + 1
    inputs = example_inputs(model)
    upper = model(**inputs, entity_ids=torch.tensor([0, 0])).image_hidden_states
    lower = model(**inputs, entity_ids=torch.tensor([1, -1])).image_hidden_states
    assert upper.shape == (2, grid**2 + 1, model.config.text_config.hidden_size)
    torch.testing.assert_close(upper[:, :-1], lower[:, :-1])  # the visual tokens do not depend on the entity
    assert not torch.allclose(upper[:, -1], lower[:, -1])
    none = model(**inputs).image_hidden_states  # no entity: every image gets its whole-image token
    torch.testing.assert_close(none[1, -1], lower[1, -1])
    with pytest.raises(ValueError, match="entity_ids"):
        model(**inputs, entity_ids=torch.tensor([0, 3]))
    with pytest.raises(StrictDataclassClassValidationError, match="entity_vocabulary"):
        medreco.create_model("vlm", "tiny", entity_tokens=True)


@pytest.mark.parametrize("entity_tokens", [False, True])
def test_remembered_frozen_features_give_the_same_loss_and_gradients_and_run_the_tower_once(entity_tokens):
    """With the vision tower (and conditioner) frozen, `remember_frozen_features` computes each
    distinct image's features once: the outputs, the loss and the trained parameters' gradients are
    those of the plain forward; an unfrozen tower is never remembered."""
    model = entity_vlm() if entity_tokens else tiny_model("vlm")
    model.train()
    inputs = example_inputs(model)
    inputs["pixel_values"] = torch.cat([inputs["pixel_values"][:1]] * 2)  # one image, twice
    if entity_tokens:
        inputs["entity_ids"] = torch.tensor([0, 1])
    inputs["labels"] = inputs["input_ids"].clone()
    calls = []
    model.model.vision_tower.register_forward_hook(lambda module, args, output: calls.append(len(args[0])))

    def loss_and_gradients():
        model.zero_grad()
        output = model(**inputs)
        output.loss.backward()
        trained = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}
        return output.loss.detach(), output.logits.detach(), trained

    plain = loss_and_gradients()
    model.remember_frozen_features()
    first, second = loss_and_gradients(), loss_and_gradients()
    assert calls == [2, 1 if not entity_tokens else 2]  # then nothing: every image is remembered
    for remembered in (first, second):
        torch.testing.assert_close(remembered[0], plain[0])
        torch.testing.assert_close(remembered[1], plain[1])
        assert remembered[2].keys() == plain[2].keys() and any("projector" in n for n in plain[2])
        for name, gradient in plain[2].items():
            torch.testing.assert_close(remembered[2][name], gradient)
    model.model.vision_tower.requires_grad_(True)  # a trainable tower is computed every time
    loss_and_gradients()
    assert len(calls) == 3
    model.remember_frozen_features(False)
    assert model.model._feature_memo is None


def _named_square_batch(config, n: int, generator: torch.Generator):
    """Two grey images per sample: one holds a bright square (finding 0), the other a dark one
    (finding 1). The question is the same token sequence every time; only the entity tokens say
    which finding it asks about. The answer names the image that holds the named finding."""
    images = 0.5 + torch.rand(n, 2, 1, 1, 40, 40, generator=generator) * 0.1
    entity = torch.randint(0, 2, (n,), generator=generator)
    which = torch.randint(0, 2, (n,), generator=generator)
    for i in range(n):
        bright = which[i] if entity[i] == 0 else 1 - which[i]
        images[i, bright, :, :, 10:30, 10:30] += 0.4
        images[i, 1 - bright, :, :, 10:30, 10:30] -= 0.4
    prompt = comparison_prompt(config)
    input_ids = torch.tensor([[*prompt, ANSWER_A if w == 0 else ANSWER_B, EOS] for w in which])
    labels = input_ids.clone()
    labels[:, : len(prompt)] = -100
    return {
        "input_ids": input_ids,
        "labels": labels,
        "pixel_values": images.reshape(2 * n, 1, 1, 40, 40),
        "modality_ids": torch.zeros(2 * n, dtype=torch.long),
        "entity_ids": entity.repeat_interleave(2),
    }, which


def test_learns_a_question_whose_finding_is_named_only_by_the_entity_tokens():
    """Each image holds one of two findings; which image is the answer depends on the finding asked
    about, which only the entity tokens carry."""
    torch.manual_seed(0)
    model = entity_vlm()
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    model.train()
    for _ in range(1200):  # the answer is an XOR of entity and image: ~300-850 steps before it clicks
        batch, _ = _named_square_batch(model.config, 16, generator)
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    batch, which = _named_square_batch(model.config, 64, generator)
    prompt_length = len(comparison_prompt(model.config))
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"][:, :prompt_length],
            pixel_values=batch["pixel_values"],
            modality_ids=batch["modality_ids"],
            entity_ids=batch["entity_ids"],
        ).logits[:, -1]
    chosen = torch.where(logits[:, ANSWER_A] > logits[:, ANSWER_B], 0, 1)
    assert (chosen == which).float().mean().item() >= 0.9
