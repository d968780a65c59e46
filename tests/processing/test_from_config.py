"""A model folder saved without its processor (`create_model` then `save_pretrained`) still gets the
processor its model needs: built from its config, by `AutoProcessor`, the processors' own
`from_pretrained` and `medreco.create_processor`; a folder from which none can be built is refused in
one line saying how to add one."""

from __future__ import annotations

from pathlib import Path

import nibabel
import pytest
import torch
from transformers import AutoModel, AutoModelForImageTextToText, AutoProcessor

import medreco
from io_helpers import box_phantom, write_nifti_volume, write_series
from medreco.processing import MedReCoImageProcessor, MedReCoProcessor, MedReCoRetrievalProcessor
from medreco.processing.from_config import MissingProcessorError, image_processor_for
from medreco.processing.processing_vlm import IMAGE_TOKEN, SPECIAL_TOKENS, conversation

MRI_FILE = Path(nibabel.__file__).parent / "tests" / "data" / "anatomical.nii"


def saved(family: str, folder: Path, **overrides) -> Path:
    medreco.create_model(family, "tiny", **overrides).save_pretrained(folder)
    assert not (folder / "processor_config.json").exists() and not (folder / "preprocessor_config.json").exists()
    return folder


@pytest.mark.parametrize("family", ["vision", "retrieval", "vlm"])
def test_the_image_processor_fits_the_encoder_of_every_family(family, tmp_path):
    overrides = {"text_model_name_or_path": medreco.BUNDLED_TEXT_ENCODER} if family == "retrieval" else {}
    folder = saved(family, tmp_path / family, **overrides)
    config = AutoModel.from_pretrained(folder).config
    vision = getattr(config, "vision_config", config)
    processor = MedReCoImageProcessor.from_pretrained(folder)
    assert processor.modalities == list(vision.modalities)
    for modality in vision.modalities:
        depth, height, width = processor.recipe(modality).size
        assert height == width == vision.image_size
        assert depth == 1 or (depth <= vision.max_depth and depth % vision.depth_patch_size == 0)
    ct = processor.recipe("chest_ct")  # the paper's field of view, at the encoder's size: 360 x 360 mm in plane
    assert ct.spacing[1] * ct.size[1] == pytest.approx(0.75 * 480) and ct.spacing[0] * ct.size[0] == pytest.approx(360)
    built = medreco.create_processor(config)
    assert processor.to_dict() == (built if family == "vision" else built.image_processor).to_dict()


def test_a_created_retrieval_model_scores_real_files_through_its_processor(tmp_path):
    folder = tmp_path / "retrieval"
    model = medreco.create_model(
        "retrieval", "tiny", load_text_weights=True, text_model_name_or_path=medreco.BUNDLED_TEXT_ENCODER
    ).eval()
    model.save_pretrained(folder)
    processor = AutoProcessor.from_pretrained(folder)
    assert isinstance(processor, MedReCoRetrievalProcessor)
    volume = box_phantom()
    write_series(tmp_path / "series", volume)
    nifti = write_nifti_volume(tmp_path / "volume.nii.gz", volume)
    images = processor(images=[tmp_path / "series", nifti], modalities="chest_ct")  # a DICOM series, its NIfTI twin
    assert images["pixel_values"].shape == (2, 1, 8, 40, 40)
    entity = processor(text=["pleural effusion"])
    with torch.no_grad():
        embedding = model.get_text_embeddings(**entity)
        out = model.get_image_features(**images, entity_embeddings=embedding.expand(2, -1))
    assert model.score(out.features[0], out.features[1]).item() == pytest.approx(1.0, abs=1e-3)  # one volume twice
    assert out.attention.shape[0] == 2 and torch.allclose(out.attention.sum(-1), torch.ones(2), atol=1e-4)


def test_a_created_vlm_answers_in_text_through_its_processor(tmp_path):
    folder = saved("vlm", tmp_path / "vlm")
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    processor = AutoProcessor.from_pretrained(folder)
    assert isinstance(processor, MedReCoProcessor)
    assert processor.image_token_id == model.config.image_token_id  # the placeholder the model replaces
    assert len(processor.tokenizer) <= model.config.text_config.vocab_size
    assert all(len(processor.tokenizer.tokenize(token)) == 1 for token in SPECIAL_TOKENS)
    inputs = processor.apply_chat_template(
        conversation("Has the effusion changed?", "brain_mri", images=[str(MRI_FILE), str(MRI_FILE)]),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    )
    assert (inputs["input_ids"] == model.config.image_token_id).sum() == 2 * 16
    output = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert isinstance(processor.batch_decode(output[:, inputs["input_ids"].shape[1] :])[0], str)


def test_a_saved_processor_wins_over_the_config(tmp_path):
    folder = saved("vision", tmp_path / "vision")
    MedReCoImageProcessor(recipes={"chest_xray": {"size": [1, 20, 20]}}).save_pretrained(folder)
    assert MedReCoImageProcessor.from_pretrained(folder).recipe("chest_xray").size == (1, 20, 20)


def test_a_folder_without_a_tokenizer_to_build_is_refused_in_one_line(tmp_path):
    folder = saved("retrieval", tmp_path / "no-text-encoder")  # the tiny preset names no text encoder
    with pytest.raises(MissingProcessorError, match=r"no tokenizer saved.*tokenizer\.save_pretrained") as error:
        AutoProcessor.from_pretrained(folder)
    assert str(folder) in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(MissingProcessorError, match="vocabulary of 152064 tokens"):
        medreco.create_processor(medreco.create_config("vlm", "paper"))


def test_create_processor_of_each_family(tmp_path):
    assert medreco.create_processor(medreco.create_config("reranker", "tiny")) is None  # it reads features
    paper = image_processor_for(medreco.create_config("vision", "paper").to_dict())
    assert paper.recipe("chest_ct").size == (240, 480, 480) and paper.recipe("chest_ct").spacing == (1.5, 0.75, 0.75)
    vlm = medreco.create_processor(medreco.create_model("vlm", "tiny"))
    assert vlm.tokenizer.convert_ids_to_tokens(3) == IMAGE_TOKEN
