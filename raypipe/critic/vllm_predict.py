"""The critic on vLLM (GPU): the same interface and the same exact group normalization as
`raypipe.critic.predict.CriticPredictor`.

Imported only through `make_predictor` on a CUDA machine, since vLLM ships CUDA-only wheels (STACK.md).
A top-k logprob list cannot guarantee every group member is present, so each request asks for the
logprobs of the whole vocabulary at the single generated position (`logprobs=-1`, which the engine
allows with `max_logprobs=-1`). vLLM's default `logprobs_mode` ("raw_logprobs") computes them from the
raw logits, before temperature or any processor, so restricting them to the group's ids and
renormalizing gives exactly softmax(logits[group]), as on torch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt

from raypipe.critic.predict import ReflectionPredictor
from raypipe.errors import ModelError
from raypipe.models import load_tokenizer, reflection_token_ids
from raypipe.prompts import ASPECT_LABELS, Aspect

logger = logging.getLogger(__name__)


def _group_softmax(logprobs: np.ndarray) -> np.ndarray:
    shifted = np.exp(logprobs - logprobs.max())
    return shifted / shifted.sum()


class VLLMCriticPredictor(ReflectionPredictor):
    """`batch_size` caps the sequences vLLM schedules at once (`max_num_seqs`)."""

    def __init__(self, model_path: str | Path, batch_size: int = 64, **llm_kwargs):
        self.tokenizer = load_tokenizer(model_path)
        ids = reflection_token_ids(self.tokenizer)
        self.group_ids = {a: [ids[t] for t in ASPECT_LABELS[a]] for a in Aspect}
        self.llm = LLM(model=str(model_path), max_logprobs=-1, max_num_seqs=batch_size, **llm_kwargs)
        self.params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1)

    def predict_prompts(self, prompts: Sequence[str], aspects: Sequence[Aspect]) -> list[np.ndarray]:
        self.check_lengths(prompts, aspects)
        # Our tokenizer, so prompt ids match the torch path and training byte for byte.
        encoded = self.tokenizer(list(prompts), add_special_tokens=True)["input_ids"]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(ids)) for ids in encoded],
                                    self.params, use_tqdm=False)
        results = []
        for output, aspect in zip(outputs, aspects, strict=True):
            position = output.outputs[0].logprobs[0]
            ids = self.group_ids[Aspect(aspect)]
            missing = [i for i in ids if i not in position]
            if missing:  # never approximate from a truncated list: that is the one thing this must not do
                raise ModelError(f"vLLM returned logprobs for {len(position)} tokens, without the group ids "
                                 f"{missing}; this vLLM version does not honour logprobs=-1")
            group = np.array([position[i].logprob for i in ids], dtype=np.float64)
            results.append(_group_softmax(group))
        return results
