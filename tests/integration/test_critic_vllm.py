"""On a CUDA machine with vLLM: the critic on the vLLM engine gives the HF engine's exact group
distributions."""

from __future__ import annotations

import numpy as np
import pytest

from raypipe.prompts import ASPECT_LABELS, Aspect, CriticExample

EXAMPLES = [
    CriticExample(Aspect.RETRIEVE_INPUT, "Who founded the Calder Library?"),
    CriticExample(Aspect.IS_REL, "Who founded the Calder Library?",
                  evidence="Calder Library\nThe Calder Library was founded in 1884 by Ruth Calder."),
    CriticExample(Aspect.IS_USE, "Add the numbers.", input="2 and 3", output="The sum is 5."),
]


@pytest.mark.gpu
def test_vllm_matches_torch_group_distributions(tiny_model_dir):
    pytest.importorskip("vllm")
    from raypipe.critic.predict import CriticPredictor, make_predictor
    from raypipe.inference.engines.vllm import VLLMEngine

    gpu = make_predictor(tiny_model_dir)
    assert isinstance(gpu.engine, VLLMEngine)
    torch_side = CriticPredictor.load(tiny_model_dir, device="cuda")
    for ex, got, want in zip(EXAMPLES, gpu.predict(EXAMPLES), torch_side.predict(EXAMPLES), strict=True):
        assert list(got) == list(ASPECT_LABELS[ex.aspect])
        assert sum(got.values()) == pytest.approx(1.0, abs=1e-9)
        np.testing.assert_allclose(list(got.values()), list(want.values()), atol=2e-2)  # bf16 vs bf16 kernels
