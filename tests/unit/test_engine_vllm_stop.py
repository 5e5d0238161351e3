"""The vLLM engine's `stop_line` orchestration, over a stand-in for vLLM's `LLM` that writes scripted
tokens and honours max_tokens, stop token ids, EOS and stop strings as vLLM does; its SamplingParams
has no `logprob_token_ids`, so the engine takes its two-pass path (an older vLLM). The real engine's
agreement with the HF loop is tests/unit/test_engine_contract.py."""

from __future__ import annotations

import importlib
import os
import sys
import types
from dataclasses import dataclass, field

import pytest

from raypipe.inference.engines.base import GenerationParams

#: the environment variables the vLLM engine sets for its start on a CPU
CPU_SETTINGS = ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "OMP_NUM_THREADS")


@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    stop_token_ids: list[int] = field(default_factory=list)
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] | None = None
    stop: list[str] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    detokenize: bool = True
    logprobs: int | None = None


class ScriptedLLM:
    """Writes, for a prompt of n tokens, the tokens `script` holds at absolute positions n, n+1, ...
    (`filler` elsewhere); records every request's sampling params."""

    script: dict[int, int] = {}
    filler = 0
    eos = -1
    tokenizer = None

    def __init__(self, **kwargs):
        self.requests: list[SamplingParams] = []
        #: the CPU settings in the environment while the engine starts
        self.environment = {name: os.environ.get(name) for name in CPU_SETTINGS}

    def generate(self, prompts, sampling, use_tqdm=False):
        sampling = sampling if isinstance(sampling, list) else [sampling] * len(prompts)
        self.requests += sampling
        return [self._one(p["prompt_token_ids"], s) for p, s in zip(prompts, sampling, strict=True)]

    def _one(self, prompt: list[int], s: SamplingParams):
        ids, finish, reason = [], "length", None
        while len(ids) < s.max_tokens:
            token = self.script.get(len(prompt) + len(ids), self.filler)
            ids.append(token)
            text = self.tokenizer.decode(ids) if s.detokenize else ""
            hit = next((x for x in s.stop or [] if x in text), None)
            if token == self.eos or token in s.stop_token_ids or hit:
                finish, reason = "stop", hit if hit else (token if token != self.eos else None)
                break
        completion = types.SimpleNamespace(token_ids=ids, logprobs=None, finish_reason=finish, stop_reason=reason)
        return types.SimpleNamespace(outputs=[completion])


@pytest.fixture
def engine(tiny_model_dir, monkeypatch):
    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = ScriptedLLM, SamplingParams
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    vllm.envs = types.ModuleType("vllm.envs")  # the CPU settings are environment variables; nothing cached
    monkeypatch.setitem(sys.modules, "vllm.envs", vllm.envs)
    for name in CPU_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # a value of the process's own, to be kept
    import raypipe.inference.engines as engines

    # a fresh import over the stand-in: the real module (a vLLM test may have imported it) is put back after
    monkeypatch.delitem(sys.modules, "raypipe.inference.engines.vllm", raising=False)
    monkeypatch.delattr(engines, "vllm", raising=False)
    module = importlib.import_module("raypipe.inference.engines.vllm")

    monkeypatch.setitem(sys.modules, "raypipe.inference.engines.vllm", module)  # dropped again after the test
    built = module.VLLMEngine(tiny_model_dir)
    ScriptedLLM.tokenizer, ScriptedLLM.eos = built.tokenizer, built.tokenizer.eos_token_id
    return built


def test_two_passes_stop_after_the_answer_line_and_carry_the_penalty(engine):
    tok = engine.tokenizer
    prompts = ["one", "one " * 40, "one " * 80]
    lengths = [len(tok(p, add_special_tokens=True)["input_ids"]) for p in prompts]
    texts = ["Relevant: True\nFinal Answer: 42\nFinal Answer: 43\nmore text", "Relevant: False\nAnalysis: no answer",
             "Final Answer: 7"]
    scripts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    scripts[2] = scripts[2] + [tok.eos_token_id]
    ScriptedLLM.script = {n + i: t for n, ids in zip(lengths, scripts, strict=True) for i, t in enumerate(ids)}
    ScriptedLLM.filler = tok(" x", add_special_tokens=False)["input_ids"][0]

    params = GenerationParams(max_new_tokens=30, stop_line="Final Answer:", frequency_penalty=0.5, return_probs=False)
    first, other, ended = engine.generate(prompts, params)
    assert (first.text, first.finish_reason) == ("Relevant: True\nFinal Answer: 42\n", "stop")
    assert (len(other.token_ids), other.finish_reason) == (30, "length") and other.text.startswith(texts[1])
    assert (ended.text, ended.finish_reason) == ("Final Answer: 7", "eos")
    # pass 1 for the three rows, stopping at the label; pass 2 for the two rows that reached it (the
    # third ends at EOS there), each with the room left and its pass-1 tokens' penalty as a logit bias
    pass1, pass2 = engine.llm.requests[:3], engine.llm.requests[3:]
    assert [s.stop for s in pass1] == [["Final Answer:"]] * 3 and [s.stop for s in pass2] == [["\n"]] * 2
    for request, head in zip(pass2, ["Relevant: True\nFinal Answer:", "Final Answer:"], strict=True):
        seen = tok(head, add_special_tokens=False)["input_ids"]
        assert request.max_tokens == 30 - len(seen)
        assert request.logit_bias == {t: -0.5 * seen.count(t) for t in seen}


def test_the_cpu_settings_hold_for_the_engine_start_only(engine):
    """Left in the environment they would reach every process started from here later (a local Ray
    instance's workers inherit it: one torch thread in a training worker of two CPUs)."""
    import torch

    # an in-process engine on the process's torch threads (no `cpu_threads` set), 1 GiB of KV cache
    assert engine.llm.environment == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
                                      "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                                      "OMP_NUM_THREADS": str(torch.get_num_threads())}
    assert os.environ["OMP_NUM_THREADS"] == "7"
    assert not any(os.environ.get(name) for name in CPU_SETTINGS[:3])
