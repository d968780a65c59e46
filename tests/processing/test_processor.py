import numpy as np
import pytest
import torch
from transformers import AutoProcessor, AutoTokenizer
from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

import medreco
from medreco.data.phantom import PhantomConfig, generate_cohort
from medreco.errors import UnknownEntityError
from medreco.factory import bundled_text_encoder_path
from medreco.processing import MedReCoImageProcessor, MedReCoProcessor

RECIPES = {"chest_xray": {"size": [1, 40, 40]}, "chest_ct": {"size": [4, 40, 40], "spacing": [40.0, 8.0, 8.0]}}


@pytest.fixture(scope="module")
def processor():
    tokenizer = AutoTokenizer.from_pretrained(bundled_text_encoder_path())
    return MedReCoProcessor(MedReCoImageProcessor(recipes=RECIPES), tokenizer, patch_size=10)


def conversation(answer="Case B.", images=None):
    images = images if images is not None else [np.random.rand(50, 50), np.random.rand(50, 50)]
    return [
        {
            "role": "user",
            "content": [
                *({"type": "image", "image": i} for i in images),
                {"type": "text", "text": "Which case has the effusion?"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]


def test_one_labelled_placeholder_block_per_image(processor):
    text = processor.apply_chat_template(conversation())
    assert text.count("<|image_pad|>") == 2 and "Case A: <|vision_start|>" in text and "Case B: " in text
    prior_current = processor.apply_chat_template(conversation(), image_labels=["Prior", "Current"])
    assert "Prior: <|vision_start|>" in prior_current and "Current: <|vision_start|>" in prior_current
    prompt = processor.apply_chat_template(conversation()[:1], add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")


def test_tokenized_inputs_mask_prompt_images_and_padding(processor):
    batch = processor.apply_chat_template(
        [conversation("Case B."), conversation("Neither case shows an effusion.")],
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    )
    assert batch["pixel_values"].shape == (4, 1, 1, 40, 40) and batch["modality_ids"].tolist() == [0, 0, 0, 0]
    ids, labels = batch["input_ids"], batch["labels"]
    assert int((ids == processor.image_token_id).sum()) == 4 * 16  # 4 images x (40/10)^2 tokens
    assert not (labels == processor.image_token_id).any()
    assert (labels[batch["attention_mask"] == 0] == -100).all()
    answers = [processor.decode(row[row != -100]) for row in labels]
    assert answers[0].startswith("case b.") and answers[1].startswith("neither case shows an effusion.")


def test_placeholder_and_image_counts_must_agree(processor):
    text = processor.apply_chat_template(conversation())
    with pytest.raises(ValueError, match="2 image placeholders for 1 images"):
        processor(text=text, images=[np.random.rand(50, 50)])
    with pytest.raises(ValueError, match="no images"):
        processor(text=text)


def test_round_trip_through_auto_processor(processor, tmp_path):
    processor.save_pretrained(tmp_path)
    loaded = AutoProcessor.from_pretrained(tmp_path)
    assert type(loaded) is MedReCoProcessor and loaded.patch_size == 10
    messages = conversation()
    a = processor.apply_chat_template(messages, tokenize=True, return_dict=True, return_tensors="pt")
    b = loaded.apply_chat_template(messages, tokenize=True, return_dict=True, return_tensors="pt")
    assert torch.equal(a["input_ids"], b["input_ids"]) and torch.allclose(a["pixel_values"], b["pixel_values"])


def test_entity_tokens_add_one_placeholder_per_image_and_name_the_entity(processor, tmp_path):
    vocabulary = ["cxr/abnormal/pleural-effusion@pleura", "cxr/abnormal/atelectasis@pulmonary-parenchyma"]
    with_entities = MedReCoProcessor(
        processor.image_processor, processor.tokenizer, patch_size=10, entity_vocabulary=vocabulary
    )
    messages = conversation()
    for block in messages[0]["content"][:2]:
        block["entity"] = vocabulary[1]
    batch = with_entities.apply_chat_template(messages, tokenize=True, return_dict=True, return_tensors="pt")
    assert int((batch["input_ids"] == with_entities.image_token_id).sum()) == 2 * (16 + 1)
    assert batch["entity_ids"].tolist() == [1, 1] and "entity_ids" in with_entities.model_input_names
    plain = with_entities.apply_chat_template(conversation(), tokenize=True, return_dict=True, return_tensors="pt")
    assert plain["entity_ids"].tolist() == [-1, -1]  # no entity named: whole-image tokens

    messages[0]["content"][0]["entity"] = "cxr/abnormal/unknown"
    with pytest.raises(UnknownEntityError, match="unknown entity 'cxr/abnormal/unknown'"):
        with_entities.apply_chat_template(messages, tokenize=True, return_dict=True, return_tensors="pt")
    with pytest.raises(ValueError, match="no entity tokens"):
        processor.apply_chat_template(messages, tokenize=True, return_dict=True, return_tensors="pt")

    with_entities.save_pretrained(tmp_path)
    loaded = AutoProcessor.from_pretrained(tmp_path)
    assert loaded.entity_vocabulary == vocabulary


def test_real_studies_with_their_modality(processor, tmp_path):
    records = generate_cohort(PhantomConfig(num_patients=1, size="tiny", seed=3), tmp_path, progress=False)
    ct = [tmp_path / r.image for r in records if r.modality == "chest_ct"]
    messages = [
        {
            "role": "user",
            "content": [
                *({"type": "image", "image": str(p), "modality": "chest_ct"} for p in ct),
                {"type": "text", "text": "Has the pleural effusion changed?"},
            ],
        }
    ]
    batch = processor.apply_chat_template(
        messages, tokenize=True, return_dict=True, add_generation_prompt=True, return_tensors="pt"
    )
    assert batch["pixel_values"].shape == (2, 1, 4, 40, 40) and batch["modality_ids"].tolist() == [1, 1]


def test_a_preprocessed_image_is_read_as_its_tensor_and_refused_by_other_settings(processor):
    """`preprocessed` gives the tensor `preprocess_one` gives, which the processor then takes as it is;
    another modality or a processor with other settings refuses it (it would misread it)."""
    image = np.random.default_rng(0).random((50, 50))
    prepared = processor.image_processor.preprocessed(image, "chest_xray")
    assert torch.equal(prepared.pixel_values, processor.image_processor.preprocess_one(image, "chest_xray"))
    plain = processor.apply_chat_template(conversation(images=[image, image]), tokenize=True, return_dict=True)
    again = processor.apply_chat_template(conversation(images=[prepared, prepared]), tokenize=True, return_dict=True)
    assert torch.equal(torch.tensor(plain["pixel_values"]), torch.tensor(again["pixel_values"]))
    assert plain["input_ids"] == again["input_ids"]
    with pytest.raises(ValueError, match="preprocessed as chest_xray"):
        processor.image_processor.preprocess_one(prepared, "chest_ct")
    other = MedReCoImageProcessor(recipes={**RECIPES, "chest_xray": {"size": [1, 20, 20]}})
    with pytest.raises(ValueError, match="other settings"):
        other.preprocess_one(prepared, "chest_xray")


def test_the_end_of_turn_token_is_trained_and_lists_come_back_by_default(processor):
    """TRL checks that an answer's end-of-turn token is inside the assistant mask (else the model
    never learns to stop); it reads the mask from untensored output, the transformers default."""
    from trl.chat_template_utils import is_chat_template_stop_token_trained

    assert is_chat_template_stop_token_trained(processor)
    output = processor.apply_chat_template(conversation(), tokenize=True, return_dict=True)
    assert isinstance(output["input_ids"][0], list) and isinstance(output["input_ids"][0][0], int)
    masked = [i for i, m in zip(output["input_ids"][0], output["labels"][0], strict=True) if m != -100]
    assert processor.tokenizer.decode(masked[-1:]) == "<|im_end|>"


def test_trl_collator_and_the_vlm_work_together(processor):
    """TRL's vision-language collator turns messages + images into a batch the VLM trains on."""
    collator = DataCollatorForVisionLanguageModeling(processor, assistant_only_loss=True)
    examples = [
        {
            "messages": [
                {"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "Which?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": answer}]},
            ],
            "images": [np.random.rand(50, 50), np.random.rand(50, 50)],
        }
        for answer in ("Case A.", "Case B, the left one.")
    ]
    batch = collator(examples)
    assert batch["pixel_values"].shape[0] == 4
    kept = [processor.decode(row[row != -100]) for row in batch["labels"]]
    assert kept[0].startswith("case a.") and kept[1].startswith("case b, the left one.")
    model = medreco.create_model(
        "vlm",
        "tiny",
        image_token_id=processor.image_token_id,
        text_config={**medreco.PRESETS["tiny"]["vlm"]["text_config"], "vocab_size": len(processor.tokenizer)},
    )
    loss = model(
        **{
            k: v
            for k, v in batch.items()
            if k in ("input_ids", "attention_mask", "labels", "pixel_values", "modality_ids")
        }
    ).loss
    assert torch.isfinite(loss)


def test_a_vocabulary_learned_from_conversations_round_trips_through_auto_processor(tmp_path):
    from medreco.processing import train_wordpiece_tokenizer

    texts = [
        "Compare the pleural effusion between Case A and Case B.\nA. Only Case A\nB. Neither",
        "Is the nodule larger in Current than in Prior?",
        "B. Only Case B shows pleural effusion.",
    ] * 20
    tokenizer = train_wordpiece_tokenizer(texts, vocab_size=200)
    assert len(tokenizer) <= 200 and tokenizer.pad_token == "[PAD]"
    ids = tokenizer.encode("Only Case B shows pleural effusion.", add_special_tokens=False)
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == "only case b shows pleural effusion."
    # a word the corpus never used still tokenizes, as pieces of its characters
    unseen = tokenizer.encode("consolidation", add_special_tokens=False)
    assert tokenizer.unk_token_id not in unseen and tokenizer.decode(unseen) == "consolidation"
    assert tokenizer.encode("€", add_special_tokens=False) == [tokenizer.unk_token_id]

    processor = MedReCoProcessor(MedReCoImageProcessor(recipes=RECIPES), tokenizer, patch_size=10)
    assert processor.image_token_id >= 0 and "<|im_end|>" in tokenizer.get_vocab()
    processor.save_pretrained(tmp_path)
    loaded = AutoProcessor.from_pretrained(tmp_path)
    messages = conversation("Only Case B shows pleural effusion.")
    a = processor.apply_chat_template(messages, tokenize=True, return_dict=True, return_tensors="pt")
    b = loaded.apply_chat_template(messages, tokenize=True, return_dict=True, return_tensors="pt")
    assert len(loaded.tokenizer) == len(tokenizer) and torch.equal(a["input_ids"], b["input_ids"])
    answer = a["labels"][0][a["labels"][0] != -100]
    assert processor.decode(answer).startswith("only case b shows pleural effusion.")

    with pytest.raises(ValueError, match="no text"):
        train_wordpiece_tokenizer(["", "  "])
    with pytest.raises(ValueError, match="use at least"):
        train_wordpiece_tokenizer(texts, vocab_size=20)


def test_a_learned_vocabulary_is_the_same_every_time():
    """The stage-2 vocabulary must not vary between runs (tokenizers' WordPieceTrainer did: ten
    trainings on this corpus gave ten vocabularies), or no stage-2 run can be repeated."""
    from medreco.processing import train_wordpiece_tokenizer

    texts = [
        f"The {w} nodule in the right upper lobe is {n} mm, {w}{n}."
        for w in ("small", "new", "mild")
        for n in range(20)
    ]
    tokenizers = [train_wordpiece_tokenizer(texts, 120) for _ in range(5)]
    vocabularies = {tuple(sorted(tokenizer.get_vocab().items())) for tokenizer in tokenizers}
    assert len(vocabularies) == 1
    vocabulary = dict(next(iter(vocabularies)))
    assert len(vocabulary) == 120 and {"the", "nodule", "lobe", "##m"} <= vocabulary.keys()
    # words by frequency, ties alphabetical, up to the budget; the rest are spelled in pieces
    assert vocabulary["nodule"] < vocabulary["small"] < vocabulary["mild0"] and "small0" not in vocabulary
    assert tokenizers[0].tokenize("small0 mild0") == ["small", "##0", "mild0"]


def random_vlm(processor, seed: int):
    """A randomly initialised tiny VLM that reads the processor's vocabulary."""
    torch.manual_seed(seed)
    text_config = {**medreco.PRESETS["tiny"]["vlm"]["text_config"], "vocab_size": len(processor.tokenizer)}
    return medreco.create_model("vlm", "tiny", image_token_id=processor.image_token_id, text_config=text_config).eval()


def test_answer_scoring_picks_the_option_whose_whole_answer_is_most_likely(processor):
    """Closed questions scored by answer likelihood: the batched, padded scoring of all options
    agrees with each answer's log-likelihood computed alone."""
    from medreco.evaluation.vqa import choose_option
    from medreco.training.stage2 import closed_answer, closed_prompt, conversation

    model = random_vlm(processor, seed=0)
    images = [np.random.rand(50, 50), np.random.rand(50, 50)]
    question, options = "Which case shows pleural effusion?", ["Case A only", "Neither case", "Both cases"]

    def log_likelihood(letter: str) -> float:
        messages = conversation(closed_prompt(question, options), "chest_xray", closed_answer(options, letter), images)
        inputs = processor.apply_chat_template(messages, tokenize=True, return_dict=True, return_tensors="pt")
        labels = inputs.pop("labels")[0, 1:]
        keep = ("input_ids", "attention_mask", "pixel_values", "modality_ids")
        with torch.no_grad():
            log_probs = model(**{k: v for k, v in inputs.items() if k in keep}).logits[0, :-1].log_softmax(-1)
        trained = labels != -100
        return float(log_probs[trained].gather(1, labels[trained][:, None]).sum())

    scores = {letter: log_likelihood(letter) for letter in "ABC"}
    assert len(set(scores.values())) == 3  # answers of different lengths and words
    assert choose_option(model, processor, images, "chest_xray", question, options, "answer") == max(
        scores, key=scores.get
    )
    assert choose_option(model, processor, images, "chest_xray", question, options, "letter") in "ABC"
    with pytest.raises(ValueError, match="unknown closed-question scoring"):
        choose_option(model, processor, images, "chest_xray", question, options, "vibes")


def test_option_scoring_reads_the_shared_prompt_once_with_the_same_logits(processor):
    """The options' answers are scored after one pass over the shared prompt (images included),
    its key-value cache reused: the logits equal those of the plain padded batch."""
    from medreco.evaluation.vqa import _option_logits
    from medreco.training.stage2 import closed_answer, closed_prompt, conversation

    model = random_vlm(processor, seed=1)
    images = [np.random.rand(50, 50), np.random.rand(50, 50)]
    options = ["Case A only", "Neither case", "Both cases", "Case B only"]
    conversations = [
        conversation(
            closed_prompt("Which case shows effusion?", options), "chest_xray", closed_answer(options, x), images
        )
        for x in "ABCD"
    ]
    inputs = processor.apply_chat_template(conversations, tokenize=True, return_dict=True, return_tensors="pt")
    keep = ("input_ids", "attention_mask", "pixel_values", "modality_ids")
    with torch.no_grad():
        plain = model(**{k: v for k, v in inputs.items() if k in keep}).logits
        shared = _option_logits(model, processor, inputs, images_per_option=2)
    valid = inputs["attention_mask"].bool()
    assert shared.shape == plain.shape
    torch.testing.assert_close(shared[valid], plain[valid], atol=1e-4, rtol=1e-4)


def test_letter_scoring_shares_the_forward_of_answer_scoring(processor):
    """The next-token logits after the assistant turn opens are the logits before the first answer
    token of the answer batch, so both scorings come from one forward and agree with each alone."""
    from medreco.evaluation.vqa import choose_option, choose_options
    from medreco.training.stage2 import closed_answer, closed_prompt, conversation

    model = random_vlm(processor, seed=1)
    images = [np.random.rand(50, 50), np.random.rand(50, 50)]
    question = "Which case shows pleural effusion?"
    options = ["Case A only", "Neither case", "Both cases", "Case B only"]
    keep = ("input_ids", "attention_mask", "pixel_values", "modality_ids")
    prompt = closed_prompt(question, options)
    opened = processor.apply_chat_template(
        conversation(prompt, "chest_xray", images=images), add_generation_prompt=True, tokenize=True,
        return_dict=True, return_tensors="pt",
    )  # fmt: skip
    answered = processor.apply_chat_template(
        conversation(prompt, "chest_xray", closed_answer(options, "C"), images),
        tokenize=True, return_dict=True, return_tensors="pt",
    )  # fmt: skip
    first_answer_token = int((answered.pop("labels")[0] != -100).nonzero()[0])
    with torch.no_grad():
        after_prompt = model(**{k: v for k, v in opened.items() if k in keep}).logits[0, -1]
        in_answer = model(**{k: v for k, v in answered.items() if k in keep}).logits[0, first_answer_token - 1]
    torch.testing.assert_close(after_prompt, in_answer, rtol=1e-4, atol=1e-4)
    both = choose_options(model, processor, images, "chest_xray", question, options, ("letter", "answer"))
    alone = {s: choose_option(model, processor, images, "chest_xray", question, options, s) for s in both}
    assert both == alone


def test_pil_images_read_like_their_png_files_and_generation_prompts_carry_no_labels(processor, tmp_path):
    from PIL import Image

    pixels = (np.random.default_rng(0).random((50, 60)) * 255).astype("uint8")
    Image.fromarray(pixels).convert("RGB").save(tmp_path / "scan.png")
    image_processor = processor.image_processor
    from_file = image_processor(str(tmp_path / "scan.png"), modalities="chest_xray")["pixel_values"]
    with Image.open(tmp_path / "scan.png") as loaded:  # an RGB PIL image, as datasets and TRL pass them
        from_pil = image_processor(loaded, modalities="chest_xray")["pixel_values"]
    torch.testing.assert_close(from_pil, from_file)
    with pytest.raises(TypeError, match="cannot read a dict as an image"):
        image_processor([{"path": "scan.png"}], modalities="chest_xray")
    prompt = processor.apply_chat_template(
        conversation(images=[loaded, loaded])[:1], tokenize=True, return_dict=True, add_generation_prompt=True
    )
    assert "labels" not in prompt and "assistant_masks" not in prompt and prompt["pixel_values"]
    training = processor.apply_chat_template(conversation(images=[loaded, loaded]), tokenize=True, return_dict=True)
    assert "labels" in training


def test_the_retrieval_processor_feeds_images_and_entity_texts_to_the_retrieval_model(tmp_path):
    from medreco.processing import MedReCoRetrievalProcessor

    tokenizer = AutoTokenizer.from_pretrained(bundled_text_encoder_path())
    recipes = {"chest_xray": {"size": [1, 40, 40]}}
    processor = MedReCoRetrievalProcessor(MedReCoImageProcessor(recipes=recipes), tokenizer)
    model = medreco.create_model("retrieval", "tiny", text_model_name_or_path=medreco.BUNDLED_TEXT_ENCODER).eval()
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    reloaded = AutoProcessor.from_pretrained(tmp_path)
    assert type(reloaded) is MedReCoRetrievalProcessor  # not the VLM's chat processor
    images = reloaded(images=[np.random.rand(50, 50), np.random.rand(50, 50)], modalities="chest_xray")
    entity = reloaded(text=["pleural effusion"])
    assert set(images) == {"pixel_values", "modality_ids"} and set(entity) == {"input_ids", "attention_mask"}
    with torch.no_grad():
        embedding = model.get_text_embeddings(**entity)
        features = model.get_image_features(**images, entity_embeddings=embedding, pairwise=True).features
    assert features.shape == (1, 2, model.config.vision_config.hidden_size)
    torch.testing.assert_close(embedding, model.encode_entity_texts(["pleural effusion"], tokenizer))
    with pytest.raises(ValueError, match="modalities"):
        reloaded(images=[np.random.rand(50, 50)])
    with pytest.raises(ValueError, match="images, text or both"):
        reloaded()
