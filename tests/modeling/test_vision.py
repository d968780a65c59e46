import pytest
import torch
from transformers import AutoModel

import medreco
from conftest import images_2d, tiny_model
from test_modeling_common import KEY_BIAS, ModelTesterMixin


class TestVisionModel(ModelTesterMixin):
    family = "vision"
    model_class = medreco.MedReCoVisionModel
    model_type = "medreco_vision"
    auto_classes = {AutoModel: medreco.MedReCoVisionModel}
    # 2D images (one depth slice: spatial blocks only) and volumes (depth 4 = 2 depth tokens: the
    # 3D patch embedding, the depth positions and the depth blocks); each kind has its own weights
    input_kinds = ("2d", "3d")
    no_gradient_parameters = (KEY_BIAS,)

    def prepare_inputs(self, model, kind, batch_size):
        generator = torch.Generator().manual_seed(1)
        depth = 1 if kind == "2d" else 4
        return {
            "pixel_values": torch.rand(batch_size, 1, depth, 40, 40, generator=generator),
            "modality_ids": self.modality_ids(batch_size),
        }

    def per_sample_outputs(self, outputs, batch_size):
        return {name: outputs[name] for name in ("last_hidden_state", "depth_hidden_states", "pooler_output")}

    def attention_maps(self, model, inputs):
        attentions = model(**inputs, output_attentions=True).attentions
        names = [f"spatial_layers.{i}" for i in range(len(model.spatial_layers))]
        if inputs["pixel_values"].shape[2] > 1:
            names += [f"depth_layers.{i}" for i in range(len(model.depth_layers))]
        assert len(attentions) == len(names)
        return dict(zip(names, attentions))

    def expected_attention_shapes(self, model, kind, batch_size):
        # spatial blocks: one sequence of 4x4 tokens per slice; depth blocks: one of 2 tokens per location
        depth = 1 if kind == "2d" else 2
        shapes = {f"spatial_layers.{i}": (batch_size * depth, 4, 16, 16) for i in range(2)}
        if kind == "3d":
            shapes["depth_layers.0"] = (batch_size * 16, 4, 2, 2)
        return shapes


def test_shapes_2d_and_3d():
    model = tiny_model("vision")
    out = model(images_2d(2), torch.tensor([0, 4]))
    assert out.last_hidden_state.shape == (2, 16, 32)
    assert out.depth_hidden_states.shape == (2, 1, 16, 32)
    assert out.pooler_output.shape == (2, 32)
    assert out.grid_size == (1, 4, 4)

    volume = model(torch.rand(2, 1, 6, 40, 40), torch.tensor([1, 2]))
    assert volume.depth_hidden_states.shape == (2, 3, 16, 32)  # depth 6 / depth patch 2
    assert torch.allclose(volume.last_hidden_state, volume.depth_hidden_states.mean(1))


def test_positions_interpolate_to_other_grids():
    model = tiny_model("vision")
    out = model(torch.rand(1, 1, 1, 60, 80), torch.tensor([0]))
    assert out.last_hidden_state.shape == (1, 6 * 8, 32)
    longer = model(torch.rand(1, 1, 20, 40, 40), torch.tensor([1]))  # 10 depth tokens > the 4 learned
    assert longer.depth_hidden_states.shape[1] == 10


def test_experts_really_separate():
    model = tiny_model("vision")
    pixels = images_2d(1).repeat(2, 1, 1, 1, 1)
    out = model(pixels, torch.tensor([0, 1])).last_hidden_state
    assert not torch.allclose(out[0], out[1], atol=1e-3)
    # and an expert's weights only touch its own modality
    with torch.no_grad():
        for block in model.spatial_layers:
            block.mlp.experts[1].fc2.weight.mul_(3.0)
    changed = model(pixels, torch.tensor([0, 1])).last_hidden_state
    torch.testing.assert_close(changed[0], out[0])
    assert not torch.allclose(changed[1], out[1], atol=1e-3)


def test_a_shared_feed_forward_layer_is_the_moe_ablation():
    from medreco.modeling import count_active_parameters

    moe, shared = tiny_model("vision"), tiny_model("vision", moe=False)
    assert all(len(block.mlp.experts) == 1 for block in [*shared.spatial_layers, *shared.depth_layers])
    pixels = images_2d(1).repeat(2, 1, 1, 1, 1)
    out = shared(pixels, torch.tensor([0, 1])).last_hidden_state
    torch.testing.assert_close(out[0], out[1])  # one set of weights for every modality
    with pytest.raises(ValueError, match="modality ids"):  # the id table still guards the input
        shared(pixels, torch.tensor([0, 7]))
    modalities = shared.config.modalities
    counts, moe_counts = count_active_parameters(shared, modalities), count_active_parameters(moe, modalities)
    assert all(counts[m] == counts["total"] for m in modalities)  # the shared layer serves everyone
    expert = sum(p.numel() for block in moe.spatial_layers for p in block.mlp.experts[0].parameters())
    expert += sum(p.numel() for block in moe.depth_layers for p in block.mlp.experts[0].parameters())
    assert counts["total"] == moe_counts["chest_xray"] == moe_counts["total"] - (len(modalities) - 1) * expert


def test_the_ablation_switch_reaches_the_retrieval_models_encoder_and_keeps_the_preset_sizes():
    tiny = medreco.create_config("retrieval", "tiny")
    shared = medreco.create_model("retrieval", "tiny", vision_config={"moe": False})  # as a recipe's overrides
    assert shared.config.vision_config.moe is False and tiny.vision_config.moe is True
    assert shared.config.vision_config.hidden_size == tiny.vision_config.hidden_size  # only `moe` changed
    assert all(len(block.mlp.experts) == 1 for block in shared.vision_model.spatial_layers)
    assert len(shared.conditioner.layers[0].mlp.experts) == tiny.vision_config.num_experts  # the conditioner's own


def test_depth_layers_run_only_for_volumes():
    model = tiny_model("vision")
    image, volume = images_2d(1), torch.rand(1, 1, 4, 40, 40)
    before_2d, before_3d = model(image, [0]).last_hidden_state, model(volume, [1]).last_hidden_state
    with torch.no_grad():
        for parameter in model.depth_layers.parameters():
            parameter.add_(0.5)
    torch.testing.assert_close(model(image, [0]).last_hidden_state, before_2d)
    assert not torch.allclose(model(volume, [1]).last_hidden_state, before_3d, atol=1e-3)


def test_gradient_checkpointing_gives_the_same_gradients():
    pixels, ids = torch.rand(2, 1, 4, 40, 40), torch.tensor([1, 3])
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = medreco.create_model("vision", "tiny").train()
        if checkpointing:
            model.activation_checkpointing_enable()
        model(pixels, ids).last_hidden_state.square().mean().backward()
        grads.append(model.embeddings.patch_embedding_3d.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.parametrize(
    ("pixels", "ids", "message"),
    [
        (torch.rand(1, 40, 40), [0], "batch, channels, depth"),
        (torch.rand(1, 1, 1, 45, 40), [0], "multiples of patch_size"),
        (torch.rand(1, 1, 3, 40, 40), [1], "depth_patch_size"),
        (torch.rand(1, 2, 1, 40, 40), [0], "channel"),
        (torch.rand(1, 1, 1, 40, 40), [7], "modality ids must lie"),
        (torch.rand(2, 1, 1, 40, 40), [0], "one per image"),
    ],
)
def test_bad_inputs_raise_clear_errors(pixels, ids, message):
    with pytest.raises(ValueError, match=message):
        tiny_model("vision")(pixels, torch.tensor(ids))


def test_modality_lookup():
    config = medreco.create_config("vision", "paper")
    assert config.modalities == ["chest_xray", "chest_ct", "abdominal_ct", "brain_mri", "ultrasound"]
    assert config.modality_id("brain_mri") == 3
    with pytest.raises(ValueError, match="knows"):
        config.modality_id("pet")


def test_paper_size_gives_576_tokens_of_dim_512():
    model = medreco.create_model("vision", "paper").eval()
    counts = model.parameter_counts()
    assert counts["total"] > counts["chest_xray"] > 0
    with torch.no_grad():
        out = model(torch.rand(1, 1, 1, 480, 480), torch.tensor([0]))
    assert out.last_hidden_state.shape == (1, 576, 512)
    assert out.grid_size == (1, 24, 24)
