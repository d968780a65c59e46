"""Where inference runs (`InferenceDevice`): settings a machine lacks are refused before any model
is read; the retrieval models keep their float32 weights under a lower precision; the VLM loads in
the precision asked. Tests marked `gpu` run the same paths on CUDA and are skipped without it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

import medreco
from medreco.data.mining import MinedData
from medreco.factory import bundled_text_encoder_path
from medreco.inference import ComparativeReader, DeviceError, GalleryIndex, InferenceDevice, RetrievalEncoder
from medreco.inference.device import parse_device
from medreco.processing import MedReCoImageProcessor

sys.path.insert(0, str(Path(__file__).parent))
from toy_mined import RECIPES, write_toy_mined

ENTITY = "Pleural effusion"
NO_CUDA = not torch.cuda.is_available()


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    data = MinedData(write_toy_mined(tmp_path_factory.mktemp("toy"), patients=12))
    ids = sorted(data.studies)
    return ids, [data.studies[s].image for s in ids]


def encoder_on(placement: InferenceDevice) -> RetrievalEncoder:
    torch.manual_seed(0)
    model = medreco.create_model("retrieval", "tiny")
    tokenizer = AutoTokenizer.from_pretrained(bundled_text_encoder_path())
    return RetrievalEncoder(model, tokenizer, MedReCoImageProcessor(recipes=RECIPES), placement)


def conditioned(encoder: RetrievalEncoder, images: list[str]) -> torch.Tensor:
    (block,) = encoder.encode_images(images, ["chest_xray"] * len(images))
    features, _ = encoder.condition(block.tokens, block.modality_ids, ENTITY)
    return features


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"device": "gpu"}, "--device 'gpu': not a device"),
        ({"device": "xla"}, "medreco runs on"),
        ({"device": "cuda:99"}, "CUDA is not available" if NO_CUDA else "there is no GPU 99"),
        ({"device": "cpu", "dtype": "float16"}, "--dtype float16 needs a GPU"),
        ({"device": "cpu", "dtype": "int8"}, "--dtype 'int8': not a precision"),
        ({"device": "cpu", "device_map": "auto"}, "--device-map auto: a device map spreads a model over GPUs"),
    ],
)
def test_a_setting_this_machine_cannot_run_is_refused_when_made(settings, message):
    with pytest.raises(DeviceError, match=re.escape(message)):
        InferenceDevice(**settings)


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_without_a_gpu_auto_is_the_cpu_in_float32_and_cuda_is_refused():
    placement = InferenceDevice()
    assert placement.torch_device == torch.device("cpu") and placement.torch_dtype == torch.float32
    assert placement.describe() == "cpu, float32"
    with placement.autocast():
        assert not torch.is_autocast_enabled("cpu")
    with pytest.raises(DeviceError, match="CUDA is not available here"):
        parse_device("cuda")


def test_bfloat16_on_the_cpu_keeps_float32_weights_and_the_features_of_float32(archive, tmp_path):
    ids, images = archive
    exact, mixed = encoder_on(InferenceDevice("cpu", "float32")), encoder_on(InferenceDevice("cpu", "bfloat16"))
    assert {p.dtype for p in mixed.model.parameters()} == {torch.float32}
    with mixed.placement.autocast():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    a, b = conditioned(exact, images), conditioned(mixed, images)
    assert b.dtype == torch.float32 and b.device.type == "cpu"
    assert not torch.equal(a, b)  # bf16 did run ...
    assert torch.nn.functional.cosine_similarity(a, b).min() > 0.98  # ... close to float32
    # an index built in float32 is the same model's under bfloat16: it opens, and search agrees
    built = GalleryIndex(tmp_path / "index", exact)
    built.add(ids, images, ["chest_xray"] * len(ids), progress=False)
    reopened = GalleryIndex(tmp_path / "index", mixed)
    query = built.entity_features("chest_xray", ENTITY)[0][0]
    assert reopened.search(query, "chest_xray", ENTITY, top_k=3)[0].study_id == ids[0]


def test_the_reader_loads_the_vlm_in_the_precision_asked_and_answers_in_text(hub_ready, archive):
    _, images = archive
    reader = ComparativeReader.from_pretrained(hub_ready["vlm"], InferenceDevice("cpu", "bfloat16"))
    assert reader.model.dtype == torch.bfloat16 and reader.model.device.type == "cpu"
    answer = reader.answer(images[0], images[1], "Is there pleural effusion in Case B?", max_new_tokens=4)
    assert isinstance(answer, str) and answer


@pytest.mark.gpu
def test_on_a_gpu_the_encoder_matches_the_cpu_and_the_index_searches_the_same(archive, tmp_path):
    ids, images = archive
    cpu, gpu = encoder_on(InferenceDevice("cpu")), encoder_on(InferenceDevice("cuda"))
    assert gpu.device.type == "cuda" and gpu.placement.torch_dtype in (torch.bfloat16, torch.float16)
    a, b = conditioned(cpu, images), conditioned(gpu, images)
    assert b.device.type == "cpu" and torch.nn.functional.cosine_similarity(a, b).min() > 0.98
    exact = conditioned(encoder_on(InferenceDevice("cuda", "float32")), images)
    torch.testing.assert_close(exact, a, atol=1e-3, rtol=1e-3)
    on_cpu, on_gpu = GalleryIndex(tmp_path / "cpu", cpu), GalleryIndex(tmp_path / "gpu", gpu)
    for index in (on_cpu, on_gpu):
        index.add(ids, images, ["chest_xray"] * len(ids), progress=False)
    query = on_cpu.entity_features("chest_xray", ENTITY)[0][0]
    assert on_gpu.search(query, "chest_xray", ENTITY, top_k=1)[0].study_id == ids[0]


@pytest.mark.gpu
def test_on_a_gpu_the_reader_answers_as_on_the_cpu_and_a_device_map_spreads_it(hub_ready, archive):
    _, images = archive
    question = "Is there pleural effusion in Case B?"
    answers = {}
    for name, placement in {
        "cpu": InferenceDevice("cpu"),
        "cuda float32": InferenceDevice("cuda", "float32"),
        "cuda auto": InferenceDevice("cuda"),
        "device map": InferenceDevice("cuda", "auto", device_map="auto"),
    }.items():
        reader = ComparativeReader.from_pretrained(hub_ready["vlm"], placement)
        assert reader.model.device.type == ("cpu" if name == "cpu" else "cuda")
        if name == "device map":
            assert reader.model.hf_device_map
        answers[name] = reader.answer(images[0], images[1], question, max_new_tokens=4)
    assert answers["cuda float32"] == answers["cpu"]  # greedy decoding of the same float32 model
    assert all(isinstance(a, str) and a for a in answers.values())
