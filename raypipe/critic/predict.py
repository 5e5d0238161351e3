"""Critic prediction: the probability of every reflection token of an aspect's group, exactly.

Self-RAG scores segments with normalized token probabilities, p(token) / sum over the token's group
(§3.3, Eq. 4), and the critic's labels are the argmax of the same distribution (§3.2.2). A top-k
logprob list can miss group members, so the distribution here is the softmax of the logits at the
answer position restricted to the group's ids; nothing is truncated.

Batches are left-padded, with the attention mask hiding the pads and position ids counted from each
row's first real token, so a row's result does not depend on what it is batched with (up to float
rounding). Rows of different aspects can share a batch: each row is normalized over its own group.

Critic prompts of one aspect share a long prefix (the aspect's instruction: 70-90% of the tokens of the
tiny critic's prompts), so a batch runs its rows' longest common prefix once, repeats its KV cache over
the rows and runs only the suffixes: the prefix caching vLLM does on GPU, done here per batch. Batches
are therefore formed per aspect, whatever the order of the input. Causal attention makes the prefix's
keys and values the same whether computed alone or inside each row, so results are unchanged.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import DynamicCache

from raypipe.models import load_model, pick_device, reflection_token_ids
from raypipe.prompts import ASPECT_LABELS, Aspect, CriticExample, critic_prompt

logger = logging.getLogger(__name__)


class ReflectionPredictor(ABC):
    """What the critic's consumers (augmentation, agreement report) need from a predictor.

    `predict_prompts` returns, per critic prompt, the group distribution as an array in
    ASPECT_LABELS order; `predict` the same as {label token: probability} for examples.
    """

    @abstractmethod
    def predict_prompts(self, prompts: Sequence[str], aspects: Sequence[Aspect]) -> list[np.ndarray]: ...

    def predict(self, examples: Sequence[CriticExample]) -> list[dict[str, float]]:
        probs = self.predict_prompts([critic_prompt(ex) for ex in examples], [ex.aspect for ex in examples])
        return [{token: float(p) for token, p in zip(ASPECT_LABELS[ex.aspect], row, strict=True)}
                for ex, row in zip(examples, probs, strict=True)]

    @staticmethod
    def check_lengths(prompts: Sequence[str], aspects: Sequence[Aspect]) -> None:
        if len(prompts) != len(aspects):
            raise ValueError(f"{len(prompts)} prompts but {len(aspects)} aspects")


class CriticPredictor(ReflectionPredictor):
    """A local critic checkpoint on torch (CPU, or CUDA without vLLM)."""

    def __init__(self, model_path: str | Path, batch_size: int = 64, device: str | None = None,
                 dtype: torch.dtype | None = None):
        self.batch_size = batch_size
        self.device = device or pick_device()
        self.model, self.tokenizer = load_model(model_path, dtype=dtype, device=self.device)
        ids = reflection_token_ids(self.tokenizer)
        self.group_ids = {a: torch.tensor([ids[t] for t in ASPECT_LABELS[a]], device=self.device)
                          for a in Aspect}
        self.pad_id = self.tokenizer.pad_token_id
        self.max_length = getattr(self.model.config, "max_position_embeddings", None)
        #: prompts cut from the left to fit the model (the answer position must stay the last token)
        self.truncated = 0

    def _encode(self, prompts: Sequence[str]) -> list[list[int]]:
        encoded = [list(ids) for ids in self.tokenizer(list(prompts), add_special_tokens=True)["input_ids"]]
        if self.max_length:
            for i, ids in enumerate(encoded):
                if len(ids) > self.max_length:
                    encoded[i] = ids[-self.max_length:]
                    self.truncated += 1
                    logger.warning("critic prompt of %d tokens cut to the last %d (model limit)",
                                   len(ids), self.max_length)
        return encoded

    def _padded(self, rows: list[list[int]], offset: int = 0) -> tuple[torch.Tensor, ...]:
        """Left-padded ids, their mask, and position ids counted from `offset` at each first real token."""
        width = max(len(ids) for ids in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for row, ids in enumerate(rows):
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            mask[row, width - len(ids):] = 1
        positions = offset + (mask.cumsum(dim=1) - 1).clamp(min=0)
        return input_ids.to(self.device), mask.to(self.device), positions.to(self.device)

    @torch.inference_mode()
    def _last_logits(self, batch: list[list[int]]) -> torch.Tensor:
        """Logits at each row's last prompt token: the shared prefix once, then the padded suffixes."""
        shared = len(os.path.commonprefix(batch)) if len(batch) > 1 else 0
        shared = min(shared, min(len(ids) for ids in batch) - 1)  # every row keeps its answer position
        cache = None
        if shared > 0:
            prefix = torch.tensor([batch[0][:shared]], dtype=torch.long, device=self.device)
            cache = DynamicCache()
            self.model(input_ids=prefix, past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache.batch_repeat_interleave(len(batch))
        input_ids, mask, positions = self._padded([ids[shared:] for ids in batch], offset=shared)
        if shared > 0:
            mask = torch.cat([torch.ones((len(batch), shared), dtype=mask.dtype, device=self.device), mask], 1)
        out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                         past_key_values=cache, use_cache=cache is not None, logits_to_keep=1)
        return out.logits[:, -1, :].float()

    def predict_prompts(self, prompts: Sequence[str], aspects: Sequence[Aspect]) -> list[np.ndarray]:
        self.check_lengths(prompts, aspects)
        encoded = self._encode(prompts)
        aspects = [Aspect(a) for a in aspects]
        results: list[np.ndarray | None] = [None] * len(encoded)
        for aspect in Aspect:
            # One aspect per batch (its instruction is the shared prefix), length-sorted so the padded
            # suffixes waste little.
            order = sorted((i for i, a in enumerate(aspects) if a is aspect), key=lambda i: len(encoded[i]))
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                logits = self._last_logits([encoded[i] for i in rows])[:, self.group_ids[aspect]].double()
                for j, probs in zip(rows, torch.softmax(logits, dim=1).cpu().numpy(), strict=True):
                    results[j] = probs
        return results  # type: ignore[return-value]


def make_predictor(model_path: str | Path, batch_size: int = 64, device: str | None = None
                   ) -> ReflectionPredictor:
    """vLLM on a CUDA machine that has it installed (the `[gpu]` extra), torch otherwise."""
    device = device or pick_device()
    if device.startswith("cuda"):
        try:
            from raypipe.critic.vllm_predict import VLLMCriticPredictor
        except ImportError:
            logger.warning("CUDA is available but vLLM is not installed: the critic runs on torch")
        else:
            return VLLMCriticPredictor(model_path, batch_size=batch_size)
    return CriticPredictor(model_path, batch_size=batch_size, device=device)
