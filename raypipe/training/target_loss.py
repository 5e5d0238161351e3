"""The causal-LM loss with output logits computed only where a label counts.

A Self-RAG or critic row puts most of its tokens (the instruction, the retrieved passage) outside the
loss, yet a plain `model(..., labels=...)` projects every position onto the whole vocabulary. With a
large vocabulary and a small model the projection is a big share of a step: SmolLM2-135M's tied
49,152 x 576 output layer is a fifth of its parameters, and on CPU a step whose loss covers 30% of the
positions ran 1.5x faster (in tokens per CPU-second) with logits at those positions only. The result
is the same loss: a mean cross-entropy over the positions whose next-token label is not -100.

`TargetLossLM` wraps the HF model for the DeepSpeed engine (its parameters are the model's, so ZeRO
partitions and checkpoints them as before); `export` unwraps it (`unwrap`, `strip_prefix`). It is used
only when the model's own logits are `output_embeddings(decoder(...).last_hidden_state)`: checked
numerically once at start-up (`computes_same_logits`), so an architecture that post-processes its
logits (Gemma's soft-capping, Cohere's logit scale) keeps the model's own loss.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from raypipe.training.encode import IGNORE_INDEX

logger = logging.getLogger(__name__)

#: key prefix of the wrapped model's parameters in the engine's state dict
PREFIX = "lm."


class TargetLossLM(nn.Module):
    """`forward(input_ids, attention_mask, labels)` -> an object with `.loss`, like an HF model's output."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.lm.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> Any:
        hidden = self.hidden(input_ids, attention_mask)
        targets = labels[:, 1:]
        counted = targets != IGNORE_INDEX
        logits = self.lm.get_output_embeddings()(hidden[:, :-1][counted])
        loss = nn.functional.cross_entropy(logits.float(), targets[counted])
        return _Output(loss)


class _Output:
    def __init__(self, loss: torch.Tensor):
        self.loss = loss


@torch.no_grad()
def computes_same_logits(model: nn.Module, vocab_size: int, atol: float = 1e-4) -> bool:
    """Whether the model's logits are its output layer applied to its decoder's last hidden state (so
    `TargetLossLM` computes the model's own loss): two forwards of 8 tokens, dropout off. Call it
    before `deepspeed.initialize`, while every rank holds the whole model."""
    if model.get_output_embeddings() is None or not hasattr(model, "get_decoder"):
        return False
    ids = torch.arange(1, 9).remainder(vocab_size).unsqueeze(0)
    mask = torch.ones_like(ids)
    was_training = model.training
    model.eval()
    try:
        ours = model.get_output_embeddings()(TargetLossLM(model).hidden(ids, mask))
        theirs = model(input_ids=ids, attention_mask=mask).logits
    except (AttributeError, TypeError) as exc:
        logger.info("logits at loss positions only: not available for %s (%s)", type(model).__name__, exc)
        return False
    finally:
        model.train(was_training)
    return ours.shape == theirs.shape and bool(torch.allclose(ours.float(), theirs.float(), atol=atol, rtol=1e-4))


def unwrap(module: nn.Module) -> nn.Module:
    """The HF model inside a `TargetLossLM` (or the module itself)."""
    return module.lm if isinstance(module, TargetLossLM) else module


def strip_prefix(state_dict: dict[str, Any]) -> dict[str, Any]:
    """A wrapped engine's state dict with the model's own keys."""
    return {k.removeprefix(PREFIX): v for k, v in state_dict.items()}
