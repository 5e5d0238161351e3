"""Critic prediction: the probability of every reflection token of an aspect's group, exactly.

Self-RAG scores segments with normalized token probabilities, p(token) / sum over the token's group
(§3.3, Eq. 4), and the critic's labels are the argmax of the same distribution (§3.2.2). The engine
(raypipe.inference.engines: vLLM or HF transformers) reads that distribution from the full logits at
the answer position; this module only turns critic prompts into engine calls, one per aspect, since
an aspect's prompts share their instruction (the engine runs a shared prefix once). The encoder critic
(`raypipe.critic.encoder_critic`) fills the same distributions without an engine; `make_predictor` picks the
kind a folder holds.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from raypipe.critic.predictor import ReflectionPredictor
from raypipe.inference.engines import Engine, make_engine
from raypipe.prompts import ASPECT_LABELS, Aspect, CriticExample, critic_prompt
from raypipe.settings.models import DecodePrecision, EngineConfig, EngineKind

logger = logging.getLogger(__name__)

#: the LM critic's vLLM KV-cache block: an aspect's prompts share an instruction of ~100-200 tokens,
#: which blocks of vLLM's CPU default (128) mostly leave out of the prefix cache; 32 is the CPU minimum
#: (its decode is slower, but a judgement decodes one token)
CRITIC_KV_BLOCK = 32


class CriticPredictor(ReflectionPredictor):
    """A critic checkpoint behind an engine."""

    def __init__(self, engine: Engine):
        self.engine = engine

    @classmethod
    def load(cls, model_path: str | Path, batch_size: int = 64, device: str | None = None,
             precision: DecodePrecision = "fp32", engine_kind: EngineKind = "auto") -> CriticPredictor:
        """The critic at `model_path` on the engine `engine_kind` picks (`auto`: vLLM wherever it imports);
        `batch_size` prompts per forward pass on transformers (vLLM schedules its own)."""
        cfg = EngineConfig(kind=engine_kind, batch_size=batch_size, precision=precision,
                           kv_block_size=CRITIC_KV_BLOCK)
        return cls(make_engine(model_path, cfg, device=device))

    def distributions(self, examples: Sequence[CriticExample]) -> list[np.ndarray]:
        return self.predict_prompts([critic_prompt(ex) for ex in examples], [ex.aspect for ex in examples])

    def predict_prompts(self, prompts: Sequence[str], aspects: Sequence[Aspect]) -> list[np.ndarray]:
        if len(prompts) != len(aspects):
            raise ValueError(f"{len(prompts)} prompts but {len(aspects)} aspects")
        aspects = [Aspect(a) for a in aspects]
        results: list[np.ndarray] = [np.empty(0)] * len(prompts)
        for aspect in Aspect:
            rows = [i for i, a in enumerate(aspects) if a is aspect]
            if not rows:
                continue
            labels = ASPECT_LABELS[aspect]
            probs = self.engine.next_token_probs([prompts[i] for i in rows], tuple(labels))
            for i, dist in zip(rows, probs, strict=True):
                results[i] = np.array([dist[t] for t in labels], dtype=np.float64)
        return results


def make_predictor(model_path: str | Path, batch_size: int = 64, device: str | None = None,
                   precision: DecodePrecision = "fp32", engine_kind: EngineKind = "auto") -> ReflectionPredictor:
    """The critic at `model_path`, of the kind its folder holds: an encoder critic (its manifest,
    `raypipe.critic.encoder`) or an LM critic on the engine `engine_kind` picks (`CriticPredictor.load`); its weights in the dtype
    `raypipe.models.device.decoding_dtype` picks for `precision`. fp32 by default: a row's labels then
    do not depend on the rows batched with it (see `augment.critic_precision`)."""
    from raypipe.critic.encoder import is_encoder_critic
    from raypipe.critic.encoder_critic import EncoderCritic

    if is_encoder_critic(model_path):
        return EncoderCritic(model_path, batch_size=batch_size, device=device, precision=precision)
    return CriticPredictor.load(model_path, batch_size=batch_size, device=device, precision=precision,
                                engine_kind=engine_kind)
