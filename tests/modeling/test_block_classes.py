"""The blocks a model keeps whole (`_no_split_modules`): what Accelerate's FSDP wraps one unit each
and device maps never split, derived from what the model holds, in our code and anyone's."""

from __future__ import annotations

import pytest
from accelerate import FullyShardedDataParallelPlugin
from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy
from transformers import AutoModel, LlamaConfig

from medreco.factory import create_model


def wrapped_classes(model) -> set[str]:
    """The classes Accelerate's own FSDP2 policy wraps when no class list is configured."""
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap")
    policy = fsdp2_prepare_auto_wrap_policy(plugin, model)
    return {type(module).__name__ for module in model.modules() if policy(module)}


def test_retrieval_model_blocks_cover_vision_conditioner_and_text_layers():
    model = create_model("retrieval", "tiny", load_text_weights=True, text_model_name_or_path="bundled:minilm")
    assert model._no_split_modules == {"MedReCoBlock", "EntityCrossAttentionLayer", "BertLayer"}
    # BERT names its embeddings block too; Accelerate gives the embeddings their own unit, so a
    # block holding them would shard them twice
    assert "BertEmbeddings" not in model._no_split_modules
    assert wrapped_classes(model) == model._no_split_modules


@pytest.mark.parametrize("family", ["vision", "reranker"])
def test_image_models_wrap_their_blocks(family):
    model = create_model(family, "tiny")
    assert model._no_split_modules == {"MedReCoBlock"} == wrapped_classes(model)


def test_vlm_blocks_follow_the_language_model_it_holds():
    model = create_model("vlm", "tiny")
    assert model._no_split_modules == {"MedReCoBlock", "Qwen2DecoderLayer"} == wrapped_classes(model)
    tiny_llama = LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4
    )
    model.model.language_model = AutoModel.from_config(tiny_llama)  # another LM, loaded after construction
    assert model._no_split_modules == {"MedReCoBlock", "LlamaDecoderLayer"} == wrapped_classes(model)
