import math

import pytest
import torch

from medreco.modeling import (
    contrastive_ranking_loss,
    smooth_ap_loss,
    symmetric_infonce_loss,
    triplet_loss_with_hard_negatives,
    triplet_relevance,
)


def test_infonce_matches_hand_computation():
    image = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    text = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    scale = torch.tensor(0.0)  # exp(0) = 1
    logits = image @ text.T  # [[1, .6], [0, .8]]
    row0 = -math.log(math.exp(1) / (math.exp(1) + math.exp(0.6)))
    row1 = -math.log(math.exp(0.8) / (math.exp(0) + math.exp(0.8)))
    col0 = -math.log(math.exp(1) / (math.exp(1) + math.exp(0)))
    col1 = -math.log(math.exp(0.8) / (math.exp(0.6) + math.exp(0.8)))
    expected = ((row0 + row1) / 2 + (col0 + col1) / 2) / 2
    assert logits.shape == (2, 2)
    assert symmetric_infonce_loss(image, text, scale).item() == pytest.approx(expected, rel=1e-6)


def test_grouped_infonce_spreads_the_target_over_identical_texts():
    image = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    text = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    scale = torch.tensor(0.0)
    # rows 0 and 1 state the same thing: their targets are half on each; row 2 is alone
    groups = torch.tensor([7, 7, 3])
    logits = image @ text.T
    targets = torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    rows = -(targets * logits.log_softmax(1)).sum(1).mean()
    cols = -(targets * logits.T.log_softmax(1)).sum(1).mean()
    assert symmetric_infonce_loss(image, text, scale, groups).item() == pytest.approx(((rows + cols) / 2).item())
    # all-distinct groups are the plain loss
    distinct = symmetric_infonce_loss(image, text, scale, torch.tensor([0, 1, 2]))
    assert distinct.item() == pytest.approx(symmetric_infonce_loss(image, text, scale).item())


def test_infonce_logits_stay_float32_under_bf16_autocast():
    generator = torch.Generator().manual_seed(0)
    image = torch.nn.functional.normalize(torch.randn(32, 128, generator=generator), dim=-1)
    text = torch.nn.functional.normalize(image + 0.3 * torch.randn(32, 128, generator=generator), dim=-1)
    scale = torch.tensor(math.log(100.0))  # CLIP's ceiling: logits near 100
    exact = symmetric_infonce_loss(image, text, scale)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = symmetric_infonce_loss(image, text, scale)
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, exact, rtol=1e-5, atol=1e-5)  # bf16 logits: off by 1e-3


def test_triplet_uses_hardest_negative():
    similarity = torch.tensor([[0.9, 0.5, 0.8]])
    relevance = torch.tensor([[1, 0, 0]])
    # hardest negative 0.8: max(0, 0.8 - 0.9 + 0.2) = 0.1 (the easy negative alone would give 0)
    assert triplet_loss_with_hard_negatives(similarity, relevance, 0.2, mining="hardest").item() == pytest.approx(0.1)


def test_semi_hard_prefers_the_hardest_negative_below_the_positive():
    similarity = torch.tensor([[0.6, 0.7, 0.5, 0.1], [0.6, 0.9, 0.8, 0.7]])
    relevance = torch.tensor([[1, 0, 0, 0], [1, 0, 0, 0]])
    # anchor 1: negatives below 0.6 are 0.5 and 0.1 -> 0.5 gives 0.1; anchor 2: none below -> hardest 0.9 gives 0.5
    loss = triplet_loss_with_hard_negatives(similarity, relevance, 0.2, mining="semi_hard")
    assert loss.item() == pytest.approx((0.1 + 0.5) / 2)


def test_batch_all_averages_violating_triplets():
    similarity = torch.tensor([[0.6, 0.7, 0.5, 0.1]])
    relevance = torch.tensor([[1, 0, 0, 0]])
    expected = ((0.7 - 0.6 + 0.2) + (0.5 - 0.6 + 0.2)) / 2  # 0.1 - 0.6 + 0.2 < 0 does not violate
    assert triplet_loss_with_hard_negatives(similarity, relevance, 0.2, mining="all").item() == pytest.approx(expected)
    with pytest.raises(ValueError, match="mining"):
        triplet_loss_with_hard_negatives(similarity, relevance, mining="easiest")


def test_triplet_averages_over_positives_and_skips_unusable_anchors():
    similarity = torch.tensor([[0.9, 0.3, 0.6, 0.0], [0.2, 0.1, 0.0, 0.9]])
    relevance = torch.tensor([[1, 1, 0, -1], [1, -1, -1, -1]])  # anchor 2 has no negative
    expected = (max(0, 0.6 - 0.9 + 0.2) + max(0, 0.6 - 0.3 + 0.2)) / 2
    assert triplet_loss_with_hard_negatives(similarity, relevance, 0.2, "hardest").item() == pytest.approx(expected)


def test_ranking_losses_without_usable_pairs_are_zero_but_differentiable():
    similarity = torch.rand(2, 3, requires_grad=True)
    relevance = torch.full((2, 3), -1)
    for loss in (triplet_loss_with_hard_negatives(similarity, relevance), smooth_ap_loss(similarity, relevance)):
        assert loss.item() == 0.0
        loss.backward()


def test_smooth_ap_matches_hand_computation():
    relevance = torch.tensor([[1, 0, 1]])
    perfect = torch.tensor([[0.9, 0.1, 0.5]])
    assert smooth_ap_loss(perfect, relevance, temperature=1e-4).item() == pytest.approx(0.0, abs=1e-6)
    # negative ranked between the positives: AP = (1/1 + 2/3) / 2
    interleaved = torch.tensor([[0.9, 0.7, 0.5]])
    assert smooth_ap_loss(interleaved, relevance, temperature=1e-4).item() == pytest.approx(1 - 5 / 6, abs=1e-5)


def test_ranking_inputs_must_match():
    with pytest.raises(ValueError, match="anchors, candidates"):
        triplet_loss_with_hard_negatives(torch.rand(2, 3), torch.ones(2, 4))


def test_triplet_relevance_layout():
    relevance = triplet_relevance(2)
    assert relevance.tolist() == [[1, -1, 0, -1], [-1, 1, -1, 0]]


def test_contrastive_ranking_loss_matches_hand_computation():
    similarity = torch.tensor([[0.9, 0.1, 0.5, 0.0], [0.2, 0.3, 0.1, 0.4]])
    relevance = torch.tensor([[1, 0, 0, -1], [-1, 1, -1, 0]])
    scale = torch.tensor([math.log(10.0)])
    # anchor 0: positive 0.9 against negatives 0.1, 0.5; anchor 1: positive 0.3 against 0.4 (unknowns left out)
    first = -math.log(math.exp(9) / (math.exp(9) + math.exp(1) + math.exp(5)))
    second = -math.log(math.exp(3) / (math.exp(3) + math.exp(4)))
    loss = contrastive_ranking_loss(similarity, relevance, scale)
    assert loss.item() == pytest.approx((first + second) / 2, rel=1e-5)


def test_contrastive_ranking_loss_rewards_the_right_order_and_trains_the_temperature():
    relevance = torch.tensor([[1, 0, 0]])
    scale = torch.tensor([math.log(14.0)], requires_grad=True)
    right = contrastive_ranking_loss(torch.tensor([[0.9, 0.1, 0.2]]), relevance, scale)
    wrong = contrastive_ranking_loss(torch.tensor([[0.1, 0.9, 0.2]]), relevance, scale)
    assert right < math.log(3) < wrong
    right.backward()
    assert scale.grad is not None and scale.grad.item() < 0  # a sharper softmax helps a correct order
    empty = contrastive_ranking_loss(torch.zeros(1, 2, requires_grad=True), torch.tensor([[1, -1]]), scale)
    assert empty.item() == 0.0


# --- TILA's temporal objectives ------------------------------------------------------------------


def test_inverting_a_progression_swaps_improving_and_worsening():
    from medreco.modeling import PROGRESSION_CLASSES, invert_progression

    probabilities = torch.tensor([[0.7, 0.2, 0.1]])
    torch.testing.assert_close(invert_progression(probabilities), torch.tensor([[0.1, 0.2, 0.7]]))
    inverse = {"improving": "worsening", "stable": "stable", "worsening": "improving"}
    assert [PROGRESSION_CLASSES[2 - i] for i in range(3)] == [inverse[c] for c in PROGRESSION_CLASSES]


def test_bidirectional_cross_entropy_matches_hand_computation():
    from medreco.modeling import bidirectional_cross_entropy

    forward = torch.tensor([[2.0, 0.0, 0.0]])
    backward = torch.tensor([[0.0, 0.0, 1.0]])
    labels = torch.tensor([0])  # improving; read backwards it is worsening (index 2)
    forward_ce = -math.log(math.exp(2) / (math.exp(2) + 2))
    backward_ce = -math.log(math.exp(1) / (math.exp(1) + 2))
    assert bidirectional_cross_entropy(forward, backward, labels).item() == pytest.approx(
        (forward_ce + backward_ce) / 2
    )
    # the reversed pair scored against the forward label instead costs more
    assert bidirectional_cross_entropy(forward, backward.flip(-1), labels) > bidirectional_cross_entropy(
        forward, backward, labels
    )


def test_temporal_consistency_is_zero_for_a_mirrored_reading_and_hand_computed_otherwise():
    from medreco.modeling import temporal_consistency_loss

    forward = torch.tensor([[1.0, 0.5, -1.0], [0.0, 2.0, 0.0]])
    assert temporal_consistency_loss(forward, forward.flip(-1)).item() == pytest.approx(0.0, abs=1e-7)
    p = forward.softmax(-1)
    # the same reading in both orders (what an order-blind model gives) is inconsistent unless symmetric
    expected = (p - p.flip(-1)).pow(2).sum(-1).mean().item()
    assert temporal_consistency_loss(forward, forward).item() == pytest.approx(expected)
    assert expected > 0.1


def test_inversion_aware_scoring_flips_with_the_order():
    from medreco.modeling import inversion_aware_probabilities, invert_progression

    generator = torch.Generator().manual_seed(0)
    forward, backward = torch.randn(5, 3, generator=generator), torch.randn(5, 3, generator=generator)
    fused = inversion_aware_probabilities(forward, backward)
    torch.testing.assert_close(fused.sum(-1), torch.ones(5))
    # the pair read in the other order gets exactly the inverse verdict
    torch.testing.assert_close(inversion_aware_probabilities(backward, forward), invert_progression(fused))
    # a perfectly mirrored model is unchanged by fusion
    torch.testing.assert_close(inversion_aware_probabilities(forward, forward.flip(-1)), forward.softmax(-1))


def test_sigmoid_loss_matches_hand_computation():
    from medreco.modeling import sigmoid_loss

    image = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    text = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    scale, bias = torch.tensor(0.0), torch.tensor(-0.5)  # t = 1, b = -0.5
    logits = image @ text.T - 0.5  # [[.5, .1], [-.5, .3]]

    def log_sigmoid(x):
        return -math.log1p(math.exp(-x))

    expected = -(log_sigmoid(0.5) + log_sigmoid(-0.1) + log_sigmoid(0.5) + log_sigmoid(0.3)) / 2
    assert logits.shape == (2, 2)
    assert sigmoid_loss(image, text, scale, bias).item() == pytest.approx(expected, rel=1e-6)


def test_change_aware_sigmoid_loss_repels_a_changed_pair_read_backwards():
    from medreco.modeling import change_aware_sigmoid_loss, pairwise_sigmoid_loss

    image = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    text = image.clone()
    scale, bias = torch.tensor(math.log(5.0)), torch.tensor(0.0)
    stable = change_aware_sigmoid_loss(image, text, torch.tensor([False, False]), scale, bias)
    changed = change_aware_sigmoid_loss(image, text, torch.tensor([True, False]), scale, bias)
    # with no change both inverted pairs still match their reports: the plain sigmoid loss
    eye = torch.eye(2, dtype=torch.bool)
    assert stable.item() == pytest.approx(pairwise_sigmoid_loss(image, text, eye, scale, bias).item())
    # the changed pair aligned with its report now costs: its own match became a negative
    positives = torch.tensor([[False, False], [False, True]])
    assert changed.item() == pytest.approx(pairwise_sigmoid_loss(image, text, positives, scale, bias).item())
    assert changed > stable + 1.0
