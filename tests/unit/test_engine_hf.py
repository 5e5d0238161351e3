"""What only the HF engine does, or what only its own loop can be checked on (forced logits through
forward hooks): the `stop_line` rule a row at a time, the frequency penalty on known logits, a prompt
prefix kept between calls, the installed transformers' cache keyword. The contract both engines keep
is tests/unit/test_engine_contract.py."""

from __future__ import annotations

import os

import pytest
import torch

from raypipe.inference.engines.base import GenerationParams
from raypipe.inference.engines.hf import HFEngine
from raypipe.tokens import GROUP_TOKENS, RELEVANT, Group
from tests.unit.test_engine_contract import PROMPTS


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> HFEngine:
    return HFEngine(tiny_model_dir, batch_size=3, device="cpu")


def test_decoding_uses_the_installed_transformers_cache_keyword_without_a_warning(engine):
    """A deprecated keyword warns once per process: in the demo that is a line on the user's terminal."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any deprecation on the engine's forward calls fails the test
        engine.generate(PROMPTS, GenerationParams(max_new_tokens=3, return_probs=True))
        engine.next_token_probs(PROMPTS[:2], (RELEVANT,))


def _scripted(engine: HFEngine, scripts: dict[int, list[int]], filler: int):
    """Make the model write scripted tokens: the token at each absolute position is looked up in
    `scripts` (prompt length -> the tokens a prompt of that length writes), `filler` elsewhere. Rows
    are told apart by their prompt lengths (position ids count from each row's first real token)."""
    table = {length + i: token for length, tokens in scripts.items() for i, token in enumerate(tokens)}

    def force(module, args, kwargs, output):
        forced = torch.full_like(output.logits[:, -1], -1e4)
        for b, position in enumerate((kwargs["position_ids"][:, -1] + 1).tolist()):
            forced[b, table.get(position, filler)] = 0.0
        output.logits[:, -1] = forced

    return engine.model.register_forward_hook(force, with_kwargs=True)


def test_stop_line_ends_each_row_after_its_first_answer_line_and_the_others_go_on(tiny_model_dir):
    engine = HFEngine(tiny_model_dir, batch_size=4, device="cpu")
    tok = engine.tokenizer
    prompts = ["one", "one " * 40, "one " * 80]
    lengths = [len(tok(p, add_special_tokens=True)["input_ids"]) for p in prompts]
    assert lengths[1] >= lengths[0] + 40 and lengths[2] >= lengths[1] + 40  # the scripts' positions never overlap
    texts = ["Relevant: True\nFinal Answer: 42\nFinal Answer: 43\nmore text", "Relevant: False\nAnalysis: no answer here",
             "Final Answer: 7"]
    scripts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    scripts[2] = scripts[2] + [tok.eos_token_id]
    filler = tok(" x", add_special_tokens=False)["input_ids"][0]
    hook = _scripted(engine, dict(zip(lengths, scripts, strict=True)), filler)
    try:
        params = GenerationParams(max_new_tokens=30, stop_line="Final Answer:", return_probs=False)
        first, other, ended = engine.generate(prompts, params)
        other_alone = engine.generate([prompts[1]], GenerationParams(max_new_tokens=30, return_probs=False))[0]
    finally:
        hook.remove()
    assert (first.text, first.finish_reason) == ("Relevant: True\nFinal Answer: 42\n", "stop")
    assert first.token_ids == scripts[0][:len(first.token_ids)]
    # the row without an answer line runs to the cap, token for token as it does alone without the rule
    assert (other.token_ids, other.finish_reason) == (other_alone.token_ids, "length") and len(other.token_ids) == 30
    assert other.text.startswith(texts[1])
    # EOS before the answer line's newline: the model's own end
    assert (ended.text, ended.finish_reason) == ("Final Answer: 7", "eos")


def test_frequency_penalty_breaks_a_greedy_repeat_and_off_changes_nothing(tiny_model_dir):
    """Logits x = 1.0 and y = 0.55 at every step (the rest far below): greedy repeats x for ever; with
    a penalty of 0.2 per earlier use, x falls to 0.4 after three uses and y wins, then they alternate
    as their counts grow (0.2 vs 0.35: y; 0.2 vs 0.15: x). Log-probs stay those of the raw logits."""
    engine = HFEngine(tiny_model_dir, device="cpu")
    x, y = 5, 6
    assert not {x, y} & engine.eos

    def fixed(module, args, kwargs, output):
        forced = torch.full_like(output.logits[:, -1], -1e4)
        forced[:, x], forced[:, y] = 1.0, 0.55
        output.logits[:, -1] = forced

    hook = engine.model.register_forward_hook(fixed, with_kwargs=True)
    try:
        off = engine.generate([PROMPTS[0]], GenerationParams(max_new_tokens=8))[0]
        on = engine.generate([PROMPTS[0]], GenerationParams(max_new_tokens=8, frequency_penalty=0.2))[0]
    finally:
        hook.remove()
    assert off.token_ids == [x] * 8
    assert on.token_ids == [x, x, x, y, x, y, x, y]
    raw = torch.log_softmax(torch.tensor([1.0, 0.55], dtype=torch.float64), -1).tolist()
    assert on.token_logprobs[2:4] == pytest.approx(raw, abs=1e-4)


QUESTIONS = ["Where was Ada Lind born?", "What is the occupation of Bob Orr?", "Who wrote The Mill?",
             "In what city did Cy Dale work?", "Where?"]


def _rewriter_prompts(engine: HFEngine) -> list[str]:
    from raypipe.methods.crag.rewrite import LMRewriter

    return [LMRewriter(engine).prompt(q) for q in QUESTIONS]


def test_a_kept_prompt_prefix_gives_the_same_generations_as_running_every_prompt_whole(tiny_model_dir):
    """CRAG's rewriter prompts (Table 7's few-shot text, then the question) in batches of 3, then one
    by one (the rewriter's retry path): from the second batch on, each starts from the prefix an
    earlier call kept, which must change no token."""
    engine = HFEngine(tiny_model_dir, batch_size=3, device="cpu")
    prompts = _rewriter_prompts(engine)
    whole = engine.generate(prompts, GenerationParams(max_new_tokens=12))
    reused = engine.generate(prompts, GenerationParams(max_new_tokens=12, reuse_prefix=True))
    reused += [engine.generate([p], GenerationParams(max_new_tokens=12, reuse_prefix=True))[0] for p in prompts[::-1]]
    for got, want in zip(reused, whole + whole[::-1], strict=True):
        assert got.token_ids == want.token_ids and got.text == want.text
        assert got.token_logprobs == pytest.approx(want.token_logprobs, abs=1e-4)


def test_the_kept_prefix_runs_once_per_engine(tiny_model_dir):
    engine = HFEngine(tiny_model_dir, batch_size=3, device="cpu")
    prompts = _rewriter_prompts(engine)
    # Table 7's text and the chat layout before the question: the tokens every rewriter prompt shares
    shared = len(os.path.commonprefix([engine.tokenizer(p)["input_ids"] for p in prompts]))
    assert shared > 300  # the tiny tokenizer's tokens for Table 7 (SmolLM2's: ~160)
    widths: list[int] = []
    hook = engine.model.register_forward_pre_hook(lambda _m, _a, kw: widths.append(kw["input_ids"].shape[1]),
                                                  with_kwargs=True)
    try:
        for reuse in (False, True):
            widths.clear()
            engine.generate(prompts[:3], GenerationParams(max_new_tokens=2, reuse_prefix=reuse))  # one batch
            engine.generate(prompts[3:], GenerationParams(max_new_tokens=2, reuse_prefix=reuse))  # another call
            long_runs = sum(w >= shared for w in widths)
            # without: each batch's prefill holds the whole text; with: the first call's prefix alone does
            assert long_runs == (1 if reuse else 2), (reuse, widths)
    finally:
        hook.remove()


@pytest.mark.parametrize(("precision", "dtype"), [("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_make_engine_loads_the_weights_in_the_configured_precision(tiny_model_dir, precision, dtype):
    from raypipe.inference.engines import make_engine
    from raypipe.settings.models import EngineConfig

    engine = make_engine(tiny_model_dir, EngineConfig(kind="hf", precision=precision), device="cpu")
    assert next(engine.model.parameters()).dtype == dtype
    probs = engine.next_token_probs([PROMPTS[0]], (RELEVANT, GROUP_TOKENS[Group.IS_REL][1]))[0]
    assert sum(probs.values()) == pytest.approx(1.0)
