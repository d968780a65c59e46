"""The battery every model family runs, the way transformers' `ModelTesterMixin` does.

A family's tester (`class TestVisionModel(ModelTesterMixin)` in test_vision.py, ...) inherits the
`test_*` methods below and says what its family is through class attributes and a few hooks:

- `family`, `overrides`: `medreco.create_model(family, "tiny", **overrides)` builds the model;
- `model_class`, `model_type`, `auto_classes`: the class that builds, its `model_type`, and every
  Auto class registered for it with the class it must load (`AUTO_REGISTRATIONS` must agree);
- `input_kinds`, `prepare_inputs(model, kind, batch_size)`: valid inputs of each kind (2D images,
  volumes, ...); `sample(inputs, index)`: one sample's inputs alone;
- `per_sample_outputs(outputs, batch_size)`: the outputs that belong to each sample (first
  dimension = sample), compared between a batch and its samples;
- `training_inputs(model, inputs)`, `training_loss(model, inputs)`: what one training step
  backpropagates; `frozen_parameter_prefixes`: the parameters that must not learn;
  `no_gradient_parameters`, `sparse_gradient_parameters`: documented exceptions to "every row of
  every trainable parameter gets a real gradient";
- `attention_maps(model, inputs)` / `expected_attention_shapes(model, kind, batch_size)`: every
  attention layer's weights by name, however the family exposes them, and the shape each must have;
  `causal_attention_prefixes`: maps that must be lower-triangular.

The class is named without the `Test` prefix, so pytest collects it only through the testers."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoConfig

from conftest import main_output, tiny_model
from medreco.modeling import AUTO_REGISTRATIONS, CheckpointMismatchError
from medreco.modeling.blocks import MedReCoAttention
from medreco.modeling.modeling_retrieval import EntityCrossAttentionLayer

# Reloaded weights are equal bit for bit, but safetensors leaves them at other memory alignments
# than freshly initialised ones, and CPU kernels round alignment-dependently: outputs agree to an ulp
# or so, not bit for bit (cloning the reloaded weights makes them identical).
ROUND_TRIP_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}

# A parameter learns when its largest gradient exceeds this fraction of the model's largest. What a
# parameter the loss cannot depend on gets instead is rounding noise, 1e-8 of the largest or less
# here; the smallest real gradients of these tiny models are above 1e-4 of it.
GRADIENT_FLOOR = 1e-6

# In softmax attention without positions applied to the keys (medreco's blocks and conditioner,
# BERT), a key bias adds one constant to every score of a query's row, which the softmax removes:
# such a bias can never learn (its gradient is rounding noise). With rotary positions on the keys
# (Qwen2), it does learn.
KEY_BIAS = r"(\.k_proj|\.attention\.self\.key)\.bias$"


def comparable_config(config) -> dict:
    """`config.to_dict()` less what legitimately changes in a round trip: the folder's path, and the
    dtype that loading writes into the sub-configs (None before saving, "float32" after)."""

    def strip(value, nested: bool):
        if not isinstance(value, dict):
            return value
        volatile = {"_name_or_path", "dtype"} if nested else {"_name_or_path"}
        return {k: strip(v, True) for k, v in value.items() if k not in volatile}

    return strip(config.to_dict(), False)


def assert_state_dicts_equal(actual: nn.Module, expected: nn.Module) -> None:
    actual_state, expected_state = actual.state_dict(), expected.state_dict()
    assert actual_state.keys() == expected_state.keys()
    for name, tensor in expected_state.items():
        assert actual_state[name].dtype == tensor.dtype, name
        assert torch.equal(actual_state[name], tensor), name


def tied_parameter_groups(model: nn.Module) -> set[frozenset[str]]:
    """Names that share one parameter (e.g. a tied LM head and input embedding)."""
    groups: dict[int, set[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(parameter), set()).add(name)
    return {frozenset(names) for names in groups.values() if len(names) > 1}


def cast_floats(inputs: dict, dtype: torch.dtype) -> dict:
    return {k: v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v for k, v in inputs.items()}


@contextmanager
def recorded_attention(model: nn.Module) -> Iterator[dict[str, torch.Tensor]]:
    """Attention weights of every medreco attention layer of `model` run inside the block, by module
    name: the self-attention of `MedReCoAttention` (forced to `output_attentions=True`, i.e. the eager
    path, for families whose forward does not return them) and the head-averaged query-over-tokens
    weights each conditioner layer returns. Each layer must run once."""
    recorded: dict[str, torch.Tensor] = {}
    handles = []

    def force_weights(module, args, kwargs):
        return args, {**kwargs, "output_attentions": True}

    def record(name):
        def hook(module, args, output):
            assert name not in recorded, f"{name} ran twice"
            recorded[name] = output[1].detach()

        return hook

    for name, module in model.named_modules():
        if isinstance(module, MedReCoAttention):
            handles.append(module.register_forward_pre_hook(force_weights, with_kwargs=True))
        if isinstance(module, (MedReCoAttention, EntityCrossAttentionLayer)):
            handles.append(module.register_forward_hook(record(name)))
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()


class ModelTesterMixin:
    family: str
    overrides: dict = {}
    model_class: type
    model_type: str
    auto_classes: dict = {}
    input_kinds: tuple[str, ...] = ("default",)
    # 6 samples: modality ids (0, 3, 1, 4, 2, 0) meet every expert of the 5, out of order, one twice
    batch_size = 6
    frozen_parameter_prefixes: tuple[str, ...] = ()
    # regexes of trainable parameters that no loss can train (asserted: their gradient is noise) ...
    no_gradient_parameters: tuple[str, ...] = ()
    # ... and of tables whose rows learn only when the batch looks them up (token embeddings); every
    # row of every other trainable parameter (each output unit of a layer) must get a gradient
    sparse_gradient_parameters: tuple[str, ...] = ()
    bf16_output_dtype = torch.bfloat16
    causal_attention_prefixes: tuple[str, ...] = ()
    # float32 on a CPU: a sample's result alone and in a batch differ by rounding only
    batch_invariance_atol = 1e-5
    batch_invariance_rtol = 1e-5

    # --- hooks ------------------------------------------------------------------------------------
    def get_model(self) -> nn.Module:
        return tiny_model(self.family, **self.overrides)

    @staticmethod
    def modality_ids(count: int, num_experts: int = 5) -> torch.Tensor:
        return (torch.arange(count) * 3) % num_experts

    def prepare_inputs(self, model, kind: str, batch_size: int) -> dict:
        raise NotImplementedError

    def sample(self, inputs: dict, index: int) -> dict:
        """The inputs of sample `index` alone (default: every input's row `index`)."""
        return {k: v[index : index + 1] if torch.is_tensor(v) else v for k, v in inputs.items()}

    def main_output(self, outputs) -> torch.Tensor:
        return main_output(None, outputs)

    def per_sample_outputs(self, outputs, batch_size: int) -> dict[str, torch.Tensor]:
        return {"main": self.main_output(outputs)}

    def training_inputs(self, model, inputs: dict) -> dict:
        return inputs

    def training_loss(self, model, inputs: dict) -> torch.Tensor:
        """The model's loss; without one, a fixed random projection of the main output (a plain sum
        would be blind to everything before a final LayerNorm, whose outputs sum to a constant)."""
        outputs = model(**inputs)
        if getattr(outputs, "loss", None) is not None:
            return outputs.loss
        output = self.main_output(outputs)
        weights = torch.randn(output.shape, generator=torch.Generator().manual_seed(2))
        return (output * weights).sum()

    def attention_maps(self, model, inputs: dict) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def expected_attention_shapes(self, model, kind: str, batch_size: int) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    # --- helpers ----------------------------------------------------------------------------------
    def all_inputs(self, model) -> Iterator[tuple[str, dict]]:
        for kind in self.input_kinds:
            yield kind, self.prepare_inputs(model, kind, self.batch_size)

    def saved_model(self, folder):
        model = self.get_model()
        model.save_pretrained(folder)
        return model

    # --- the battery ------------------------------------------------------------------------------
    def test_save_and_load_round_trip_in_safetensors(self, tmp_path):
        model = self.saved_model(tmp_path)
        files = {p.name for p in tmp_path.iterdir()}
        assert {"model.safetensors", "config.json"} <= files, files
        assert not any(name.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt")) for name in files), files
        saved = load_file(tmp_path / "model.safetensors")
        not_saved = set(model.state_dict()) - set(saved)
        assert not_saved <= set(getattr(model, "_tied_weights_keys", None) or {}), not_saved  # tied copies only
        assert set(saved) <= set(model.state_dict())
        assert json.loads((tmp_path / "config.json").read_text())["model_type"] == self.model_type

        loaded = self.model_class.from_pretrained(tmp_path)
        assert type(loaded) is self.model_class and not loaded.training
        assert_state_dicts_equal(loaded, model)
        assert tied_parameter_groups(loaded) == tied_parameter_groups(model)
        assert comparable_config(loaded.config) == comparable_config(model.config)
        with torch.no_grad():
            for kind, inputs in self.all_inputs(model):
                for name, value in self.per_sample_outputs(model(**inputs), self.batch_size).items():
                    reloaded = self.per_sample_outputs(loaded(**inputs), self.batch_size)[name]
                    torch.testing.assert_close(reloaded, value, **ROUND_TRIP_TOLERANCE, msg=f"{kind} {name}")

    @pytest.mark.parametrize("change", ["missing", "unexpected", "mismatched"])
    def test_loading_is_strict(self, change, tmp_path):
        model = self.saved_model(tmp_path)
        path = tmp_path / "model.safetensors"
        weights = load_file(path)
        tied = getattr(model, "_tied_weights_keys", None) or {}
        candidates = sorted(set(weights) - set(tied) - set(tied.values()))
        key = candidates[len(candidates) // 2]
        if change == "missing":
            del weights[key]
            expected = key
        elif change == "unexpected":
            expected = key.rsplit(".", 1)[0] + ".leftover"
            weights[expected] = torch.zeros(2)
        else:
            shape = weights[key].shape
            weights[key] = torch.zeros(shape[0] + 1, *shape[1:])
            expected = "shapes do not match"
        save_file(weights, path, metadata={"format": "pt"})
        with pytest.raises(CheckpointMismatchError) as error:
            self.model_class.from_pretrained(tmp_path)
        assert expected in str(error.value)
        for auto_class in self.auto_classes:  # the Auto classes (and a base model's part of the checkpoint) too
            with pytest.raises(CheckpointMismatchError):
                auto_class.from_pretrained(tmp_path)
        if change == "mismatched":
            # transformers' own escape hatch does not bypass strictness
            with pytest.raises(CheckpointMismatchError, match="mismatched_keys"):
                self.model_class.from_pretrained(tmp_path, ignore_mismatched_sizes=True)
            _, info = self.model_class.from_pretrained(
                tmp_path, strict=False, ignore_mismatched_sizes=True, output_loading_info=True
            )
            assert [name for name, *_ in info["mismatched_keys"]] == [key]
        else:
            _, info = self.model_class.from_pretrained(tmp_path, strict=False, output_loading_info=True)
            assert set(info[f"{change}_keys"]) == {expected}

    def test_auto_classes_load_the_saved_folder(self, tmp_path):
        registered = {model_type: (config, dict(models)) for model_type, config, models in AUTO_REGISTRATIONS}
        config_class, models = registered[self.model_type]
        assert models == self.auto_classes
        assert self.model_class in self.auto_classes.values()
        model = self.saved_model(tmp_path)
        assert type(model) is self.model_class and model.config.model_type == self.model_type

        config = AutoConfig.from_pretrained(tmp_path)
        assert type(config) is config_class and config.model_type == self.model_type
        inputs = next(self.all_inputs(model))[1]
        for auto_class, model_class in self.auto_classes.items():
            loaded = auto_class.from_pretrained(tmp_path)
            assert type(loaded) is model_class, auto_class.__name__
            assert loaded.config.model_type == self.model_type
            # a base-model Auto class takes the base model out of the checkpoint of the full one
            reference = model if model_class is self.model_class else model.base_model
            assert type(reference) is model_class
            assert_state_dicts_equal(loaded, reference)
            with torch.no_grad():
                torch.testing.assert_close(
                    self.main_output(loaded(**inputs)), self.main_output(reference(**inputs)), **ROUND_TRIP_TOLERANCE
                )

    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
    def test_from_pretrained_dtype(self, dtype, tmp_path):
        model = self.saved_model(tmp_path)
        auto_class = next(auto for auto, model_class in self.auto_classes.items() if model_class is self.model_class)
        loaded = auto_class.from_pretrained(tmp_path, dtype=dtype)
        assert type(loaded) is self.model_class
        assert {p.dtype for p in loaded.parameters()} == {dtype}
        loaded_state = loaded.state_dict()
        for name, tensor in model.state_dict().items():  # the saved weights, cast: nothing re-initialised
            expected = tensor.to(dtype) if tensor.is_floating_point() else tensor
            assert torch.equal(loaded_state[name], expected), name
        expected_dtype = self.bf16_output_dtype if dtype == torch.bfloat16 else torch.float32
        with torch.no_grad():
            for kind, inputs in self.all_inputs(loaded):
                for name, value in self.per_sample_outputs(
                    loaded(**cast_floats(inputs, dtype)), self.batch_size
                ).items():
                    assert value.dtype == expected_dtype, (kind, name)
                    assert torch.isfinite(value).all(), (kind, name)

    def test_batch_size_invariance(self):
        model = self.get_model()
        for kind, inputs in self.all_inputs(model):
            with torch.no_grad():
                batched = self.per_sample_outputs(model(**inputs), self.batch_size)
                singles = [self.per_sample_outputs(model(**self.sample(inputs, i)), 1) for i in range(self.batch_size)]
            for name, value in batched.items():
                assert value.shape[0] == self.batch_size, (kind, name)
                for i, single in enumerate(singles):
                    assert single[name].shape == (1, *value.shape[1:]), (kind, name)
                    torch.testing.assert_close(
                        value[i : i + 1],
                        single[name],
                        atol=self.batch_invariance_atol,
                        rtol=self.batch_invariance_rtol,
                        msg=lambda m, kind=kind, name=name, i=i: f"{kind} {name}, sample {i}: {m}",
                    )

    def test_gradients_reach_every_trainable_parameter(self):
        model = self.get_model().train()
        names = [name for name, _ in model.named_parameters()]
        frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
        assert frozen == {name for name in names if name.startswith(self.frozen_parameter_prefixes)}
        for pattern in self.no_gradient_parameters + self.sparse_gradient_parameters:
            assert any(re.search(pattern, name) for name in names), f"stale exception {pattern!r}"
        # one backward pass through every kind of input (2D images and volumes use different weights)
        loss = sum(self.training_loss(model, self.training_inputs(model, batch)) for _, batch in self.all_inputs(model))
        assert loss.ndim == 0 and torch.isfinite(loss)
        loss.backward()
        grads = {name: p.grad for name, p in model.named_parameters() if name not in frozen}
        assert all(model.get_parameter(name).grad is None for name in frozen)
        largest = max(grad.abs().max() for grad in grads.values() if grad is not None)
        floor = GRADIENT_FLOOR * largest
        problems = []
        for name, grad in grads.items():
            if any(re.search(pattern, name) for pattern in self.no_gradient_parameters):
                if grad is not None and grad.abs().max() > floor:
                    problems.append(f"{name}: listed as unable to learn, but has a gradient")
            elif grad is None or not torch.isfinite(grad).all():
                problems.append(f"{name}: {'no' if grad is None else 'non-finite'} gradient")
            elif grad.abs().max() <= floor:
                problems.append(f"{name}: gradient at rounding-noise level ({grad.abs().max():.1e})")
            elif not any(re.search(pattern, name) for pattern in self.sparse_gradient_parameters):
                dead = grad.reshape(grad.shape[0], -1).eq(0).all(dim=1)
                if dead.any():
                    problems.append(f"{name}: rows {dead.nonzero().flatten().tolist()} get no gradient")
        assert not problems, "\n".join(problems)

    def test_attention_maps(self):
        model = self.get_model()
        for kind, inputs in self.all_inputs(model):
            with torch.no_grad():
                maps = self.attention_maps(model, inputs)
            shapes = {name: tuple(value.shape) for name, value in maps.items()}
            assert shapes == self.expected_attention_shapes(model, kind, self.batch_size), kind
            for name, weights in maps.items():
                assert torch.isfinite(weights).all() and (weights >= 0).all(), (kind, name)
                rows = weights.sum(-1)
                torch.testing.assert_close(rows, torch.ones_like(rows), atol=1e-5, rtol=0, msg=f"{kind} {name}")
                if name.startswith(self.causal_attention_prefixes):
                    assert not weights.triu(diagonal=1).any(), (kind, name)  # no token sees the future

    def test_eager_and_sdpa_attention_agree(self):
        model = self.get_model()
        assert model.config._attn_implementation == "sdpa"
        for kind, inputs in self.all_inputs(model):
            model.set_attn_implementation("sdpa")
            with torch.no_grad():
                sdpa = self.per_sample_outputs(model(**inputs), self.batch_size)
                model.set_attn_implementation("eager")
                eager = self.per_sample_outputs(model(**inputs), self.batch_size)
            for name, value in sdpa.items():
                torch.testing.assert_close(eager[name], value, atol=1e-5, rtol=1e-5, msg=f"{kind} {name}")
