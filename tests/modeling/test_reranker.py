import pytest
import torch
from transformers import AutoModel

import medreco
from conftest import tiny_model
from medreco.modeling import select_top_tokens
from test_modeling_common import KEY_BIAS, ModelTesterMixin, recorded_attention


class TestReranker(ModelTesterMixin):
    family = "reranker"
    model_class = medreco.MedReCoReranker
    model_type = "medreco_reranker"
    auto_classes = {AutoModel: medreco.MedReCoReranker}
    no_gradient_parameters = (KEY_BIAS,)

    def prepare_inputs(self, model, kind, batch_size):
        generator = torch.Generator().manual_seed(1)
        k, d = model.config.top_k, model.config.hidden_size  # all top_k tokens: every position embedding is used
        return {
            "query_tokens": torch.randn(batch_size, k, d, generator=generator),
            "query_features": torch.randn(batch_size, d, generator=generator),
            "candidate_tokens": torch.randn(batch_size, k, d, generator=generator),
            "candidate_features": torch.randn(batch_size, d, generator=generator),
            "modality_ids": self.modality_ids(batch_size),
        }

    def per_sample_outputs(self, outputs, batch_size):
        return {"logits": outputs.logits, "probabilities": outputs.probabilities}

    def training_inputs(self, model, inputs):
        labels = (torch.arange(len(inputs["modality_ids"])) % 2).float()
        return {**inputs, "labels": labels}

    def attention_maps(self, model, inputs):
        # the forward returns no attention maps (and ignores output_attentions): record its blocks'
        with recorded_attention(model) as maps:
            model(**inputs)
        return maps

    def expected_attention_shapes(self, model, kind, batch_size):
        # [CLS; f_q; 8 query tokens; f_c; 8 candidate tokens] = 19 positions, 4 heads, 1 layer
        return {"layers.0.attention": (batch_size, 4, 19, 19)}


def test_select_top_tokens_follows_attention():
    tokens = torch.arange(2 * 5 * 3, dtype=torch.float).view(2, 5, 3)
    attention = torch.tensor([[0.1, 0.5, 0.0, 0.3, 0.1], [0.9, 0.0, 0.05, 0.0, 0.05]])
    top = select_top_tokens(tokens, attention, 2)
    torch.testing.assert_close(top[0], tokens[0, [1, 3]])
    torch.testing.assert_close(top[1, 0], tokens[1, 0])
    assert select_top_tokens(tokens, attention, 99).shape == (2, 5, 3)  # k capped at the token count
    with pytest.raises(ValueError, match="does not match"):
        select_top_tokens(tokens, attention[:, :4], 2)


def _pair_inputs(batch: int, k: int = 8, d: int = 32):
    return {
        "query_tokens": torch.randn(batch, k, d),
        "query_features": torch.randn(batch, d),
        "candidate_tokens": torch.randn(batch, k, d),
        "candidate_features": torch.randn(batch, d),
        "modality_ids": torch.randint(0, 5, (batch,)),
    }


def test_bce_loss_and_probabilities():
    model = tiny_model("reranker")
    labels = torch.tensor([1.0, 0.0, 1.0])
    out = model(**_pair_inputs(3), labels=labels)
    assert out.logits.shape == out.probabilities.shape == (3,)
    torch.testing.assert_close(out.probabilities, torch.sigmoid(out.logits))
    expected = torch.nn.functional.binary_cross_entropy(out.probabilities, labels)
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_rejects_more_tokens_than_configured():
    model = tiny_model("reranker")
    with pytest.raises(ValueError, match="top_k"):
        model(**_pair_inputs(2, k=9))


def test_order_of_query_and_candidate_matters_through_segments():
    model = tiny_model("reranker")
    inputs = _pair_inputs(2)
    swapped = dict(
        inputs,
        query_tokens=inputs["candidate_tokens"],
        candidate_tokens=inputs["query_tokens"],
        query_features=inputs["candidate_features"],
        candidate_features=inputs["query_features"],
    )
    assert not torch.allclose(model(**inputs).logits, model(**swapped).logits)


def test_learns_to_tell_matching_pairs():
    """Tokens come from one of 4 prototypes plus noise; a pair is relevant when both share one."""
    model = medreco.create_model("reranker", "tiny").train()
    prototypes = torch.randn(4, 32) * 2
    generator = torch.Generator().manual_seed(0)

    def batch(n):
        query_class = torch.randint(0, 4, (n,), generator=generator)
        same = torch.rand(n, generator=generator) < 0.5
        candidate_class = torch.where(
            same, query_class, (query_class + torch.randint(1, 4, (n,), generator=generator)) % 4
        )

        def tokens(classes):
            return prototypes[classes][:, None, :] + torch.randn(n, 8, 32, generator=generator)

        def feature(classes):
            return torch.nn.functional.normalize(prototypes[classes] + torch.randn(n, 32, generator=generator), dim=-1)

        return dict(
            query_tokens=tokens(query_class),
            query_features=feature(query_class),
            candidate_tokens=tokens(candidate_class),
            candidate_features=feature(candidate_class),
            modality_ids=torch.zeros(n, dtype=torch.long),
        ), same.float()

    held_out, held_labels = batch(256)
    with torch.no_grad():
        before = ((model.eval()(**held_out).probabilities > 0.5).float() == held_labels).float().mean().item()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    model.train()
    for _ in range(150):
        inputs, labels = batch(32)
        loss = model(**inputs, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        after = ((model.eval()(**held_out).probabilities > 0.5).float() == held_labels).float().mean().item()
    assert sum(losses[-20:]) / 20 < 0.5 * sum(losses[:20]) / 20
    assert after > 0.9 and after > before + 0.2, (before, after)


def test_paper_size_sequence():
    config = medreco.create_config("reranker", "paper")
    assert config.top_k == 64 and config.max_sequence_length == 131
    model = medreco.create_model("reranker", "paper").eval()
    with torch.no_grad():
        out = model(**_pair_inputs(2, k=64, d=512))
    assert out.logits.shape == (2,)
