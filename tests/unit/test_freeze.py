"""`training.*.trainable_layers`: the lower layers frozen and cut off from the backward pass."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from raypipe.errors import ConfigError
from raypipe.training.freeze import freeze_lower_layers


def _model(tied: bool) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                        num_attention_heads=2, tie_word_embeddings=tied))


def _backward(model: LlamaForCausalLM) -> None:
    ids = torch.arange(24).reshape(2, 12) % 97
    model(input_ids=ids, labels=ids).loss.backward()


@pytest.mark.parametrize("tied", [False, True])
def test_top_layers_get_the_full_models_gradients_and_the_lower_ones_none(tied):
    full, frozen = _model(tied), _model(tied)
    counts = freeze_lower_layers(frozen, 1)
    _backward(full)
    _backward(frozen)

    layers_full, layers_frozen = full.model.layers, frozen.model.layers
    assert counts["frozen_layers"] == 3
    for layer in layers_frozen[:3]:
        assert all(p.grad is None and not p.requires_grad for p in layer.parameters())
    for a, b in zip(layers_full[3].parameters(), layers_frozen[3].parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)  # the forward is unchanged
    assert torch.allclose(full.model.norm.weight.grad, frozen.model.norm.weight.grad, atol=1e-6)
    embedding = frozen.get_input_embeddings().weight
    if tied:  # learns from the output layer only: the reflection tokens' rows still move
        assert embedding.requires_grad and embedding.grad is not None
        assert not torch.allclose(embedding.grad, full.get_input_embeddings().weight.grad)
    else:
        assert embedding.grad is None and frozen.lm_head.weight.grad is not None
        assert torch.allclose(full.lm_head.weight.grad, frozen.lm_head.weight.grad, atol=1e-6)
    assert counts["trainable"] == sum(p.numel() for p in frozen.parameters() if p.requires_grad)


def test_as_many_trainable_layers_as_the_model_has_changes_nothing():
    model = _model(True)
    before = copy.deepcopy(model.state_dict())
    assert freeze_lower_layers(model, 4)["frozen"] == 0
    assert all(p.requires_grad for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_model_without_decoder_layers_is_a_config_error():
    with pytest.raises(ConfigError, match="trainable_layers"):
        freeze_lower_layers(torch.nn.Linear(2, 2), 1)


@pytest.mark.parametrize(("section", "stage", "trained"), [
    (8, None, 8),        # a stage without its own setting trains what its section says
    (8, "all", None),    # "all": every layer, whatever the section says
    (None, 4, 4),        # a number overrides a section that trains every layer
    (None, None, None),
])
def test_a_stage_can_train_other_layers_than_its_section(section, stage, trained):
    from raypipe.settings.training import TrainStage

    assert TrainStage(trainable_layers=stage).layers(section) == trained


def test_a_stage_refuses_zero_trainable_layers_or_an_unknown_word():
    from pydantic import ValidationError

    from raypipe.settings.training import TrainStage

    for bad in (0, "some"):
        with pytest.raises(ValidationError, match="trainable_layers"):
            TrainStage(trainable_layers=bad)
