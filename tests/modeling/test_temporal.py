"""BioViL-T's prior-image fusion and the progression head: shapes, the missing-prior token, what the
static features keep, saving and loading, and learning a change that only the pair shows."""

import pytest
import torch
from huggingface_hub.errors import StrictDataclassClassValidationError
from transformers import AutoModel

import medreco
from conftest import images_2d
from medreco.modeling import PROGRESSION_CLASSES, bidirectional_cross_entropy
from medreco.modeling.modeling_vision import sinusoidal_positions_2d


def temporal_model(**overrides):
    return medreco.create_model(
        "retrieval", "tiny", vision_config={"num_temporal_layers": 1}, progression_head=True, **overrides
    ).eval()


def test_sinusoidal_positions_tell_every_grid_cell_apart():
    positions = sinusoidal_positions_2d(3, 4, 32)
    assert positions.shape == (12, 32)
    assert torch.cdist(positions, positions).add(torch.eye(12)).min() > 0.1
    assert sinusoidal_positions_2d(2, 2, 30)[:, 28:].abs().sum() == 0  # channels past a multiple of 4


def test_fusion_fills_the_missing_prior_token_and_reads_the_prior_where_there_is_one():
    model = medreco.create_model("vision", "tiny", num_temporal_layers=2).eval()
    current, prior = images_2d(3), images_2d(3)
    ids = torch.tensor([0, 0, 4])
    has_prior = torch.tensor([True, False, True])
    with torch.no_grad():
        output = model(current, ids, prior_pixel_values=prior, has_prior=has_prior)
        other_prior = model(current, ids, prior_pixel_values=images_2d(3), has_prior=has_prior)
        static = model(current, ids)
    fused = output.temporal_hidden_state
    assert fused.shape == output.last_hidden_state.shape == (3, 16, 32)
    torch.testing.assert_close(output.last_hidden_state, static.last_hidden_state)  # P_curr ignores the prior
    assert static.temporal_hidden_state is None
    missing = model.temporal.missing_prior.expand(16, -1)
    torch.testing.assert_close(fused[1], missing)  # no prior: the learned token, whatever was passed
    torch.testing.assert_close(other_prior.temporal_hidden_state[1], missing)
    assert not torch.allclose(fused[0], other_prior.temporal_hidden_state[0])  # a prior changes P_diff
    assert not torch.allclose(fused[0], missing)


def test_fusion_refuses_what_it_cannot_read():
    model = medreco.create_model("vision", "tiny", num_temporal_layers=1)
    tokens = torch.randn(2, 16, 32)
    with pytest.raises(ValueError, match="no prior tokens"):
        model.fuse_prior(tokens, None, torch.tensor([0, 0]), has_prior=torch.tensor([True, False]))
    with pytest.raises(ValueError, match="must match"):
        model.fuse_prior(tokens, torch.randn(2, 9, 32), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="square grid"):
        model.fuse_prior(torch.randn(2, 15, 32), torch.randn(2, 15, 32), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="no prior-image fusion"):
        medreco.create_model("vision", "tiny").fuse_prior(tokens, tokens, torch.tensor([0, 0]))
    with pytest.raises(StrictDataclassClassValidationError, match="num_temporal_layers"):
        medreco.create_config("retrieval", "tiny", progression_head=True)
    with pytest.raises(StrictDataclassClassValidationError, match="num_temporal_layers"):
        medreco.create_config("vision", "tiny", num_temporal_layers=-1)


def test_progression_head_is_batch_invariant_and_sees_both_orders():
    model = temporal_model()
    current, prior = torch.randn(4, 16, 32), torch.randn(4, 16, 32)
    ids = torch.tensor([0, 1, 0, 4])
    entity = torch.nn.functional.normalize(torch.randn(4, 32), dim=-1)
    with torch.no_grad():
        logits = model.progression_logits(current, prior, ids, entity)
        single = model.progression_logits(current[2:3], prior[2:3], ids[2:3], entity[2:3])
        reversed_logits = model.progression_logits(prior, current, ids, entity)
    assert logits.shape == (4, len(PROGRESSION_CLASSES))
    torch.testing.assert_close(logits[2:3], single, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(logits, reversed_logits)


def test_temporal_model_round_trips_and_loads_through_auto_model(tmp_path):
    model = temporal_model()
    model.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path)
    assert isinstance(loaded, medreco.MedReCoModel)
    assert loaded.config.vision_config.num_temporal_layers == 1 and loaded.config.progression_head
    current, prior = images_2d(2), images_2d(2)
    ids = torch.tensor([0, 3])
    entity = torch.nn.functional.normalize(torch.randn(2, 32), dim=-1)
    with torch.no_grad():
        torch.testing.assert_close(
            model.predict_progression(current, prior, ids, entity),
            loaded.eval().predict_progression(current, prior, ids, entity),
        )


def test_gradients_reach_the_fusion_and_the_head():
    model = temporal_model().train()
    current, prior = torch.randn(3, 16, 32), torch.randn(3, 16, 32)
    ids, entity = torch.tensor([0, 0, 1]), torch.nn.functional.normalize(torch.randn(3, 32), dim=-1)
    has_prior = torch.tensor([True, True, False])
    forward = model.progression_logits(current, prior, ids, entity, has_prior)
    backward = model.progression_logits(prior, current, ids, entity, has_prior)
    bidirectional_cross_entropy(forward, backward, torch.tensor([0, 1, 2])).backward()
    trained = [n for n, p in model.named_parameters() if n.startswith(("vision_model.temporal.", "progression."))]
    silent = [n for n in trained if model.get_parameter(n).grad is None or not model.get_parameter(n).grad.any()]
    # key biases cancel in softmax attention; experts of modalities the batch lacks stay idle
    silent = [n for n in silent if not n.endswith("k_proj.bias") and ".experts." not in n]
    assert trained and not silent, silent


def change_pairs(count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pairs whose current image alone says nothing of the change: the current token's value is
    uniform, the prior's is the current one minus the change (-1, 0, +1 for the three classes)."""
    labels = torch.randint(0, 3, (count,), generator=generator)
    current_value = torch.rand(count, generator=generator) * 4 - 2
    prior_value = current_value - (labels - 1).float()
    noise = 0.1 * torch.randn(count, 2, 4, 32, generator=generator)  # a 2x2 token grid
    direction = torch.randn(32, generator=torch.Generator().manual_seed(5))
    direction = torch.nn.functional.normalize(direction - direction.mean(), dim=0) * 3  # LayerNorm keeps it
    current = current_value[:, None, None] * direction + noise[:, 0]
    prior = prior_value[:, None, None] * direction + noise[:, 1]
    return current, prior, labels


@pytest.mark.parametrize("with_prior", [True, False])
def test_learns_a_change_only_the_pair_shows(with_prior):
    """With the prior fused, the head learns the change; with the missing-prior token in its place
    (the static baseline, same model and budget), it stays near chance."""
    generator = torch.Generator().manual_seed(0)
    model = temporal_model().train()
    entity = torch.nn.functional.normalize(torch.randn(1, 32, generator=generator), dim=-1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(300):
        current, prior, labels = change_pairs(32, generator)
        has_prior = torch.full((32,), with_prior)
        logits = model.progression_logits(
            current, prior, torch.zeros(32, dtype=torch.long), entity.expand(32, -1), has_prior
        )
        loss = torch.nn.functional.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    current, prior, labels = change_pairs(300, generator)
    with torch.no_grad():
        logits = model.eval().progression_logits(
            current, prior, torch.zeros(300, dtype=torch.long), entity.expand(300, -1), torch.full((300,), with_prior)
        )
    accuracy = (logits.argmax(-1) == labels).float().mean().item()
    if with_prior:
        assert accuracy > 0.8, accuracy
    else:
        assert accuracy < 0.5, accuracy
