"""The `Engine` contract, run on both engines: exact group probabilities (softmax over a group's ids
of the model's own logits, Self-RAG App. A.4), batching that changes nothing, stop tokens kept, plain
generation with the same tokens, and, between the engines, the same greedy tokens and distributions.

Every engine here holds fp32 weights: the precision in which vLLM on a CPU is exact and repeatable.
The vLLM cases are `slow` (an engine takes 10-30 s to start; one per model is shared by the session),
so `make test-unit` runs the HF half and `make test` both.
"""

from __future__ import annotations

import pytest
import torch

from raypipe.inference.engines.base import Engine, GenerationParams
from raypipe.models import load_model
from raypipe.tokens import GROUP_TOKENS, RELEVANT, Group

PROMPTS = [
    "### Instruction:\nWho wrote the novel?\n\n### Response:\n",
    "hi",
    "### Instruction:\nTell me about a city.\n\n### Response:\n[Retrieval]<paragraph>A city\nIt is old.</paragraph>",
    "one two three four five six seven eight nine ten eleven twelve",
    "[No Retrieval]",
]
KINDS = ["hf", pytest.param("vllm", marks=pytest.mark.slow)]


def long_prompt(engine: Engine) -> str:
    """A prompt longer than the model's positions (512 for the tests' tiny model)."""
    return " ".join(["seven"] * (engine.max_positions + 50))


@pytest.fixture(scope="module")
def reference(tiny_model_dir):
    """The tiny model in plain transformers: the logits every engine's read-outs are checked against."""
    return load_model(tiny_model_dir, dtype=torch.float32, device="cpu")[0]


def _engine(kind: str, model_dir, vllm_engines, batch_size: int = 3) -> Engine:
    if kind == "vllm":
        return vllm_engines(model_dir)
    from raypipe.inference.engines.hf import HFEngine

    return HFEngine(model_dir, batch_size=batch_size, device="cpu", dtype=torch.float32)


@pytest.fixture(params=KINDS)
def engine(request, tiny_model_dir, vllm_engines) -> Engine:
    return _engine(request.param, tiny_model_dir, vllm_engines)


def _expected_group_probs(model, context_ids: list[int], ids: list[int]) -> list[float]:
    """p(token) / Σ_group p from a plain forward pass and a softmax over the whole vocabulary."""
    with torch.no_grad():
        logits = model(torch.tensor([context_ids])).logits[0, -1].double()
    probs = torch.softmax(logits, dim=-1)[ids]
    return (probs / probs.sum()).tolist()


def _prompt_ids(engine: Engine, prompt: str) -> list[int]:
    return engine.tokenizer(prompt, add_special_tokens=True)["input_ids"]


def test_next_group_probs_are_exact(engine, reference):
    got = engine.next_group_probs(PROMPTS, Group.RETRIEVE)
    for prompt, probs in zip(PROMPTS, got, strict=True):
        assert list(probs) == list(GROUP_TOKENS[Group.RETRIEVE])
        expected = _expected_group_probs(reference, _prompt_ids(engine, prompt), engine.groups.ids[Group.RETRIEVE])
        assert list(probs.values()) == pytest.approx(expected, abs=1e-5)


def test_batched_equals_one_by_one(engine):
    params = GenerationParams(max_new_tokens=8, first_position_groups=(Group.IS_REL, Group.IS_USE))
    batched = engine.generate(PROMPTS, params)
    for prompt, together in zip(PROMPTS, batched, strict=True):
        alone = engine.generate([prompt], params)[0]
        assert together.token_ids == alone.token_ids
        assert together.text == alone.text
        assert together.token_logprobs == pytest.approx(alone.token_logprobs, abs=1e-4)
        assert [(r.position, r.group) for r in together.reflections] == [(r.position, r.group) for r in alone.reflections]
        for a, b in zip(together.reflections, alone.reflections, strict=True):
            assert list(a.probs.values()) == pytest.approx(list(b.probs.values()), abs=1e-5)


def test_first_position_groups_and_logprobs_are_exact(engine, reference):
    gen = engine.generate([PROMPTS[2]], GenerationParams(max_new_tokens=4, first_position_groups=(Group.IS_REL,)))[0]
    context = _prompt_ids(engine, PROMPTS[2])
    expected = _expected_group_probs(reference, context, engine.groups.ids[Group.IS_REL])
    assert list(gen.group_probs(Group.IS_REL, position=0).values()) == pytest.approx(expected, abs=1e-5)
    with torch.no_grad():
        logits = reference(torch.tensor([context + gen.token_ids[:2]])).logits[0, -1].double()
    assert gen.token_logprobs[2] == pytest.approx(torch.log_softmax(logits, -1)[gen.token_ids[2]].item(), abs=1e-4)
    assert gen.cumulative_logprob == pytest.approx(sum(gen.token_logprobs))


@pytest.fixture(scope="module")
def relevant_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model rewired so that greedy decoding writes [Relevant] at every position, with IsRel's
    distribution a known function of the hidden state: one embedding dimension is a large constant
    (so the final norm's output there is positive whatever the context), the final norm keeps that
    dimension only, and the output layer's only non-zero row is [Relevant]'s, reading it."""
    model, tokenizer = load_model(tiny_model_dir, dtype=torch.float32, device="cpu")
    relevant = tokenizer.convert_tokens_to_ids(RELEVANT)
    with torch.no_grad():
        model.get_input_embeddings().weight[:, 0] = 100.0
        model.model.norm.weight.zero_()
        model.model.norm.weight[0] = 1.0
        head = model.get_output_embeddings().weight
        head.zero_()
        head[relevant, 0] = 1.0
    out = tmp_path_factory.mktemp("relevant_model")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_reflection_positions_record_their_group(kind, relevant_model_dir, vllm_engines):
    engine = _engine(kind, relevant_model_dir, vllm_engines)
    reference = load_model(relevant_model_dir, dtype=torch.float32, device="cpu")[0]
    relevant = engine.groups.id_of[RELEVANT]
    gen = engine.generate([PROMPTS[0]], GenerationParams(max_new_tokens=3))[0]
    assert gen.token_ids == [relevant] * 3
    assert gen.text == RELEVANT * 3
    assert [(r.position, r.group) for r in gen.reflections] == [(0, Group.IS_REL), (1, Group.IS_REL), (2, Group.IS_REL)]
    context = _prompt_ids(engine, PROMPTS[0]) + gen.token_ids[:2]
    expected = _expected_group_probs(reference, context, engine.groups.ids[Group.IS_REL])
    assert list(gen.reflections[2].probs.values()) == pytest.approx(expected, abs=1e-5)
    assert expected[0] > 0.99  # the rewiring did what it says: this is not a uniform distribution


def test_stop_token_ends_the_generation_and_is_kept(engine):
    # the untrained model may end a prompt early with its EOS: take the prompt it runs on longest
    frees = engine.generate(PROMPTS, GenerationParams(max_new_tokens=10))
    prompt, free = max(zip(PROMPTS, frees, strict=True), key=lambda pf: len(pf[1].token_ids))
    assert free.finish_reason == "length" and len(free.token_ids) == 10
    # the first token that did not occur before it: stopping on it must cut right after it
    j = next(j for j in range(1, 10) if free.token_ids[j] not in free.token_ids[:j])
    stopped = engine.generate([prompt], GenerationParams(max_new_tokens=10, stop_token_ids=(free.token_ids[j],)))[0]
    assert stopped.token_ids == free.token_ids[: j + 1]
    assert stopped.finish_reason == "stop"
    assert stopped.token_logprobs == pytest.approx(free.token_logprobs[: j + 1], abs=1e-4)


def test_plain_generation_gives_the_same_tokens_without_probabilities(engine):
    params = GenerationParams(max_new_tokens=8, first_position_groups=(Group.IS_REL,))
    full = engine.generate(PROMPTS[:2], params)
    plain = engine.generate(PROMPTS[:2], GenerationParams(max_new_tokens=8, return_probs=False))
    assert [g.token_ids for g in plain] == [g.token_ids for g in full]
    assert all(g.token_logprobs == [] and g.reflections == [] for g in plain)
    assert all(g.reflections for g in full)


def test_a_prompt_longer_than_the_model_is_cut_from_the_left(engine):
    """The latest context is kept and the cut counted; the engines cut alike (the agreement tests
    below run such a prompt)."""
    long = long_prompt(engine)
    assert len(_prompt_ids(engine, long)) > engine.max_positions
    before = engine.truncated
    gen = engine.generate([long], GenerationParams(max_new_tokens=4))[0]
    assert engine.truncated == before + 1
    assert len(gen.token_ids) == 4 or gen.finish_reason != "length"


# --- the two engines against each other ---------------------------------------------------------------


@pytest.fixture(scope="module")
def both(tiny_model_dir, vllm_engines) -> tuple[Engine, Engine]:
    return _engine("hf", tiny_model_dir, vllm_engines), vllm_engines(tiny_model_dir)


@pytest.mark.slow
def test_the_engines_give_the_same_tokens_and_group_probabilities(both):
    hf, vllm = both
    params = GenerationParams(max_new_tokens=12, first_position_groups=(Group.IS_REL, Group.RETRIEVE))
    prompts = [*PROMPTS, long_prompt(hf)]
    for a, b in zip(hf.generate(prompts, params), vllm.generate(prompts, params), strict=True):
        assert a.token_ids == b.token_ids
        assert (a.text, a.finish_reason) == (b.text, b.finish_reason)
        assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-4)
        assert [(r.position, r.group) for r in a.reflections] == [(r.position, r.group) for r in b.reflections]
        for x, y in zip(a.reflections, b.reflections, strict=True):
            assert list(x.probs.values()) == pytest.approx(list(y.probs.values()), abs=1e-4)


@pytest.mark.slow
def test_the_engines_agree_on_stop_line_and_frequency_penalty(both):
    """vLLM runs the `stop_line` rule in two passes (stop at the label, then at the newline, the first
    pass's penalty carried as a logit bias): the same tokens as the HF loop, which runs it in one. The
    label is a piece of the HF engine's own output, so the second pass is taken."""
    hf, vllm = both
    free = hf.generate(PROMPTS, GenerationParams(max_new_tokens=24, frequency_penalty=0.3, return_probs=False))
    label = free[0].text[4:9]
    assert label.strip()
    params = GenerationParams(max_new_tokens=24, stop_line=label, frequency_penalty=0.3)
    for a, b in zip(hf.generate(PROMPTS, params), vllm.generate(PROMPTS, params), strict=True):
        assert a.token_ids == b.token_ids
        assert (a.text, a.finish_reason) == (b.text, b.finish_reason)
        assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-4)


@pytest.mark.slow
def test_on_smollm2_the_engines_agree_within_1e4(smollm2_dir, vllm_engines):
    """The real 30-layer LM with its 49k vocabulary, in fp32: the same greedy tokens, and every group
    distribution within 1e-4 (the read-outs at each position of a Self-RAG-style prompt)."""
    from raypipe.inference.engines.hf import HFEngine

    hf = HFEngine(smollm2_dir, batch_size=8, device="cpu", dtype=torch.float32)
    vllm = vllm_engines(smollm2_dir)
    prompts = [hf.prompt(q) for q in ("Who wrote Hamlet?", "Name a river in France.", "What is 2 + 3?")]
    prompts.append(prompts[0] + "[Retrieval]<paragraph>Hamlet\nHamlet is a tragedy by William Shakespeare.</paragraph>")
    params = GenerationParams(max_new_tokens=24, first_position_groups=(Group.IS_REL, Group.RETRIEVE, Group.IS_USE))
    for a, b in zip(hf.generate(prompts, params), vllm.generate(prompts, params), strict=True):
        assert a.token_ids == b.token_ids
        assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-3)
        for x, y in zip(a.reflections, b.reflections, strict=True):
            assert (x.position, x.group) == (y.position, y.group)
            assert list(x.probs.values()) == pytest.approx(list(y.probs.values()), abs=1e-4)
    for a, b in zip(hf.next_group_probs(prompts, Group.RETRIEVE), vllm.next_group_probs(prompts, Group.RETRIEVE),
                    strict=True):
        assert list(a.values()) == pytest.approx(list(b.values()), abs=1e-4)
