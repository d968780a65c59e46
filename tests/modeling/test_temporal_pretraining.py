"""Temporal pretraining of the retrieval model: BioViL-T's image-report alignment on the prior-fused
tokens and TILA's change-aware sigmoid loss on the pair read backwards, as parts of the alignment
loss; the zero-shot progression reading they make possible."""

import pytest
import torch
from huggingface_hub.errors import StrictDataclassClassValidationError

import medreco
from conftest import images_2d
from medreco.modeling import PriorBatch, StatementBatch, TextBatch, change_aware_sigmoid_loss


def temporal_model(temporal_alignment_weight=1.0, change_aware_weight=0.0):
    torch.manual_seed(0)
    return medreco.create_model(
        "retrieval",
        "tiny",
        vision_config={"num_temporal_layers": 1},
        temporal_alignment_weight=temporal_alignment_weight,
        change_aware_weight=change_aware_weight,
    ).eval()


def alignment_inputs(batch=4, has_prior=(True, True, True, False), changed=(True, False, True, False)):
    generator = torch.Generator().manual_seed(1)
    reports = TextBatch(
        torch.randint(1000, 2000, (batch, 7), generator=generator), torch.ones(batch, 7, dtype=torch.long)
    )
    return {
        "pixel_values": images_2d(batch),
        "modality_ids": torch.zeros(batch, dtype=torch.long),
        "reports": reports,
        "priors": PriorBatch(images_2d(batch), torch.tensor(has_prior), torch.tensor(changed)),
    }


def loss_of(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).loss


def test_weights_of_zero_leave_the_alignment_loss_as_it_was():
    model = temporal_model(temporal_alignment_weight=0.0)
    inputs = alignment_inputs()
    without_priors = {k: v for k, v in inputs.items() if k != "priors"}
    torch.testing.assert_close(loss_of(model, inputs), loss_of(model, without_priors))
    assert model(**inputs).temporal_loss == 0


def test_the_temporal_loss_reads_the_priors_of_the_studies_that_have_one():
    model = temporal_model()
    inputs = alignment_inputs()
    output = model(**inputs)
    assert output.temporal_loss > 0
    priors = inputs["priors"]
    unread = priors.pixel_values.clone()
    unread[3] = torch.rand_like(unread[3])  # the study without a prior
    read = priors.pixel_values.clone()
    read[0] = torch.rand_like(read[0])
    same = loss_of(model, {**inputs, "priors": PriorBatch(unread, priors.has_prior, priors.changed)})
    other = loss_of(model, {**inputs, "priors": PriorBatch(read, priors.has_prior, priors.changed)})
    torch.testing.assert_close(same, output.loss.detach())
    assert not torch.allclose(other, output.loss.detach())
    # fewer than two studies with a prior: no negative for InfoNCE, no temporal term
    lonely = alignment_inputs(has_prior=(True, False, False, False))
    assert model(**lonely).temporal_loss == 0


def test_gradients_reach_the_fusion_blocks():
    model = temporal_model(change_aware_weight=1.0).train()
    model(**alignment_inputs()).temporal_loss.backward()
    fusion = {n: p.grad for n, p in model.named_parameters() if n.startswith("vision_model.temporal.")}
    # every pair here has a prior (the missing-prior token is not read); one modality's expert works
    silent = [n for n, g in fusion.items() if g is None or not g.any()]
    silent = [n for n in silent if "missing_prior" not in n and ".experts." not in n and not n.endswith("k_proj.bias")]
    assert fusion and not silent, silent
    assert model.change_logit_scale.grad is not None and model.change_logit_bias.grad is not None


def test_the_change_aware_term_is_tilas_loss_on_the_reversed_pairs():
    """Only the change-aware term on: the temporal loss equals Eq. 1 computed by hand on the pairs
    read backwards (prior as current), and moves with the change labels."""
    model = temporal_model(temporal_alignment_weight=0.0, change_aware_weight=1.0)
    inputs = alignment_inputs()
    priors, rows = inputs["priors"], torch.tensor([0, 1, 2])
    with torch.no_grad():
        ids = inputs["modality_ids"][rows]
        current = model.vision_model.encode(inputs["pixel_values"][rows], ids).last_hidden_state
        prior = model.vision_model.encode(priors.pixel_values[rows], ids).last_hidden_state
        inverted = model.condition(model.temporal_tokens(prior, current, ids), ids).features
        reports = model.get_text_embeddings(inputs["reports"].input_ids, inputs["reports"].attention_mask)[rows]
        expected = change_aware_sigmoid_loss(
            inverted, reports, priors.changed[rows], model.change_logit_scale, model.change_logit_bias
        )
        output = model(**inputs)
    torch.testing.assert_close(output.temporal_loss, expected)
    none_changed = PriorBatch(priors.pixel_values, priors.has_prior, torch.zeros(4, dtype=torch.bool))
    assert not torch.allclose(loss_of(model, {**inputs, "priors": none_changed}), output.loss)
    with pytest.raises(ValueError, match="change label"):
        model(**{**inputs, "priors": PriorBatch(priors.pixel_values, priors.has_prior)})


def test_statements_of_studies_with_a_prior_are_aligned_on_the_fused_tokens():
    model = temporal_model()
    inputs = alignment_inputs()
    generator = torch.Generator().manual_seed(4)
    pairs = torch.tensor([[0, 0], [0, 1], [0, 3], [1, 2]])  # (entity row, image row); image 3 has no prior
    statements = StatementBatch(
        TextBatch(torch.randint(1000, 2000, (2, 3), generator=generator)),
        TextBatch(torch.randint(1000, 2000, (4, 5), generator=generator)),
        pairs,
    )
    with_statements = model(**inputs, statements=statements).temporal_loss
    assert with_statements > model(**inputs).temporal_loss


def test_temporal_losses_need_the_fusion():
    with pytest.raises(StrictDataclassClassValidationError, match="temporal_alignment_weight needs a temporal"):
        medreco.create_config("retrieval", "tiny", temporal_alignment_weight=1.0)
    with pytest.raises(StrictDataclassClassValidationError, match="change_aware_weight"):
        medreco.create_config("retrieval", "tiny", change_aware_weight=1.0)
    static = medreco.create_model("retrieval", "tiny")
    inputs = alignment_inputs()
    with pytest.raises(ValueError, match="no prior-image fusion"):
        static(**inputs)
