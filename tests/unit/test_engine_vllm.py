"""The vLLM engine agrees with the HF engine: same greedy tokens, same exact group probabilities."""

from __future__ import annotations

import pytest

from raypipe.inference.engines.base import GenerationParams
from raypipe.tokens import Group

pytestmark = pytest.mark.gpu

PROMPTS = [
    "### Instruction:\nWho wrote the novel?\n\n### Response:\n",
    "### Instruction:\nTell me about a city.\n\n### Response:\n[Retrieval]<paragraph>A city\nIt is old.</paragraph>",
]


@pytest.fixture(scope="module")
def engines(tiny_model_dir):
    pytest.importorskip("vllm")
    import torch

    from raypipe.inference.engines.hf import HFEngine
    from raypipe.inference.engines.vllm import VLLMEngine

    # both in float32, so that greedy choices cannot differ by precision
    hf = HFEngine(tiny_model_dir, device="cuda", dtype=torch.float32)
    return hf, VLLMEngine(tiny_model_dir, gpu_memory_utilization=0.3, dtype="float32")


def test_same_tokens_and_group_probabilities(engines):
    hf, vllm = engines
    params = GenerationParams(max_new_tokens=12, first_position_groups=(Group.IS_REL, Group.RETRIEVE))
    for a, b in zip(hf.generate(PROMPTS, params), vllm.generate(PROMPTS, params), strict=True):
        assert a.token_ids == b.token_ids
        assert a.text == b.text
        assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-3)
        assert [(r.position, r.group) for r in a.reflections] == [(r.position, r.group) for r in b.reflections]
        for x, y in zip(a.reflections, b.reflections, strict=True):
            assert list(x.probs.values()) == pytest.approx(list(y.probs.values()), abs=1e-3)


def test_next_group_probs_agree(engines):
    hf, vllm = engines
    for a, b in zip(hf.next_group_probs(PROMPTS, Group.RETRIEVE), vllm.next_group_probs(PROMPTS, Group.RETRIEVE),
                    strict=True):
        assert list(a.values()) == pytest.approx(list(b.values()), abs=1e-3)


def test_stop_line_and_frequency_penalty_agree(engines):
    """vLLM runs the `stop_line` rule in two passes (stop at the label, then at the newline, the first
    pass's penalty carried as a logit bias): the same tokens as the HF loop, which runs it in one. The
    label is a piece of the HF engine's own output, so the second pass is taken."""
    hf, vllm = engines
    free = hf.generate(PROMPTS, GenerationParams(max_new_tokens=24, frequency_penalty=0.3, return_probs=False))
    label = free[0].text[4:9]
    assert label.strip()
    params = GenerationParams(max_new_tokens=24, stop_line=label, frequency_penalty=0.3, return_probs=False)
    for a, b in zip(hf.generate(PROMPTS, params), vllm.generate(PROMPTS, params), strict=True):
        assert a.token_ids == b.token_ids
        assert (a.text, a.finish_reason) == (b.text, b.finish_reason)
