"""The loss with logits at loss positions only: the model's own loss and gradients, or not used."""

from __future__ import annotations

import copy

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from raypipe.training.encode import IGNORE_INDEX
from raypipe.training.target_loss import TargetLossLM, computes_same_logits, strip_prefix, unwrap


def _model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=2, tie_word_embeddings=True))


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids = (torch.arange(30).reshape(2, 15) * 7) % 97
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0  # a padded row
    labels = ids.clone()
    labels[0, :9] = IGNORE_INDEX  # a prompt and a passage outside the loss
    labels[1, :4] = IGNORE_INDEX
    labels[1, 7:10] = IGNORE_INDEX
    labels[1, 12:] = IGNORE_INDEX
    return ids, mask, labels


def test_same_loss_and_gradients_as_the_models_own():
    plain = _model()
    wrapped = TargetLossLM(copy.deepcopy(plain))
    ids, mask, labels = _batch()
    ours = wrapped(input_ids=ids, attention_mask=mask, labels=labels).loss
    theirs = plain(input_ids=ids, attention_mask=mask, labels=labels).loss
    assert torch.allclose(ours, theirs, atol=1e-6)
    ours.backward()
    theirs.backward()
    for (name, a), b in zip(wrapped.lm.named_parameters(), plain.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name


class _ScaledLogits(LlamaForCausalLM):
    """An architecture that post-processes its logits (as Gemma's soft-capping does)."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * 2.0
        return out


def test_used_only_when_the_model_computes_its_logits_from_the_last_hidden_state():
    assert computes_same_logits(_model(), 97)
    torch.manual_seed(0)
    scaled = _ScaledLogits(_model().config)
    assert not computes_same_logits(scaled, 97)
    assert scaled.training  # the check leaves the mode as it found it


def test_export_sees_the_models_own_keys():
    model = _model()
    wrapped = TargetLossLM(model)
    assert unwrap(wrapped) is model and unwrap(model) is model
    assert set(strip_prefix(wrapped.state_dict())) == set(model.state_dict())
