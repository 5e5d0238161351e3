"""Critic prediction on the untrained tiny critic through the HF engine: exact group normalization,
independent of batching, padding and the shared prefix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raypipe.critic.predict import CriticPredictor
from raypipe.prompts import ASPECT_LABELS, Aspect, CriticExample, critic_prompt

PASSAGE = "Ada Harlow\nAda Harlow (born 1931) is a Dutch painter. She studied in Utrecht."
EXAMPLES = [
    CriticExample(Aspect.RETRIEVE_INPUT, "Who taught Ada Harlow?"),
    CriticExample(Aspect.IS_USE, "Add the numbers.", input="2 and 3", output="The sum is 5."),
    CriticExample(Aspect.IS_REL, "Tell me about Ada Harlow.", evidence=PASSAGE),
    CriticExample(Aspect.IS_SUP, "Tell me about Ada Harlow.", evidence=PASSAGE,
                  preceding="Ada Harlow is a painter.", output="She studied in Utrecht."),
    CriticExample(Aspect.RETRIEVE, "Tell me about Ada Harlow.", evidence=PASSAGE,
                  output="She was born in 1931 in a small harbour town on the coast."),
    CriticExample(Aspect.IS_USE, "Write a haiku.", output="Rain on the roof. " * 6),
    CriticExample(Aspect.RETRIEVE_INPUT, "Reverse the string.", input="abc"),
]


@pytest.fixture(scope="module")
def predictor(tiny_model_dir) -> CriticPredictor:
    return CriticPredictor.load(tiny_model_dir, batch_size=64, device="cpu", engine_kind="hf")


def _group_ids(tokenizer, aspect: Aspect) -> list[int]:
    return [tokenizer.convert_tokens_to_ids(t) for t in ASPECT_LABELS[aspect]]


@torch.inference_mode()
def _unpadded_reference(predictor: CriticPredictor, ex: CriticExample) -> np.ndarray:
    """One prompt alone, no padding: softmax of the last position's logits over the group's ids."""
    ids = predictor.engine.tokenizer(critic_prompt(ex), return_tensors="pt")["input_ids"]
    logits = predictor.engine.model(input_ids=ids).logits[0, -1].double()
    return torch.softmax(logits[_group_ids(predictor.engine.tokenizer, ex.aspect)], dim=0).numpy()


def test_each_distribution_covers_exactly_its_group_and_sums_to_one(predictor):
    for ex, dist in zip(EXAMPLES, predictor.predict(EXAMPLES), strict=True):
        assert list(dist) == list(ASPECT_LABELS[ex.aspect])
        assert sum(dist.values()) == pytest.approx(1.0, abs=1e-12)
        assert all(0.0 < p < 1.0 for p in dist.values())


def test_probabilities_equal_the_softmax_restricted_to_the_group_ids(predictor):
    for ex, dist in zip(EXAMPLES, predictor.predict(EXAMPLES), strict=True):
        np.testing.assert_allclose(list(dist.values()), _unpadded_reference(predictor, ex), atol=1e-5)


def test_group_softmax_is_not_the_full_vocabulary_softmax(predictor):
    ex = EXAMPLES[2]
    ids = predictor.engine.tokenizer(critic_prompt(ex), return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        full = torch.softmax(predictor.engine.model(input_ids=ids).logits[0, -1].double(), dim=0)
    mass = float(full[_group_ids(predictor.engine.tokenizer, ex.aspect)].sum())
    assert mass < 0.5  # an untrained model spreads mass over the vocabulary; the group is renormalized
    assert sum(predictor.predict([ex])[0].values()) == pytest.approx(1.0)


def test_batched_equals_one_by_one_and_ignores_batch_composition(predictor, tiny_model_dir):
    batched = predictor.predict(EXAMPLES)
    single = CriticPredictor.load(tiny_model_dir, batch_size=1, device="cpu", engine_kind="hf").predict(EXAMPLES)
    pairs = CriticPredictor.load(tiny_model_dir, batch_size=2, device="cpu", engine_kind="hf").predict(EXAMPLES[::-1])[::-1]
    for a, b, c in zip(batched, single, pairs, strict=True):
        np.testing.assert_allclose(list(a.values()), list(b.values()), atol=1e-5)
        np.testing.assert_allclose(list(a.values()), list(c.values()), atol=1e-5)


def test_rows_sharing_a_long_prefix_match_the_unpadded_reference(predictor, tiny_model_dir):
    """Same-aspect rows share their instruction; the batch runs it once and reuses its KV cache."""
    examples = [CriticExample(Aspect.IS_REL, "Tell me about Ada Harlow.", evidence=f"{PASSAGE} Fact {i}." * (1 + i % 3))
                for i in range(9)]
    batched = CriticPredictor.load(tiny_model_dir, batch_size=4, device="cpu", engine_kind="hf").predict(examples)
    for ex, dist in zip(examples, batched, strict=True):
        np.testing.assert_allclose(list(dist.values()), _unpadded_reference(predictor, ex), atol=1e-5)


@torch.inference_mode()
def test_a_prompt_that_is_a_prefix_of_another_keeps_its_answer_position(predictor):
    prompts = ["### Instruction:\nJudge.", "### Instruction:\nJudge. More words here.", "### Instruction:\nJudge."]
    got = predictor.predict_prompts(prompts, [Aspect.IS_USE] * 3)
    for prompt, probs in zip(prompts, got, strict=True):
        ids = predictor.engine.tokenizer(prompt, return_tensors="pt")["input_ids"]
        logits = predictor.engine.model(input_ids=ids).logits[0, -1].double()
        want = torch.softmax(logits[_group_ids(predictor.engine.tokenizer, Aspect.IS_USE)], dim=0).numpy()
        np.testing.assert_allclose(probs, want, atol=1e-5)


@torch.inference_mode()
def test_left_padding_matches_a_right_padded_batch(predictor):
    tok, model = predictor.engine.tokenizer, predictor.engine.model
    encoded = [tok(critic_prompt(ex))["input_ids"] for ex in EXAMPLES]
    width = max(map(len, encoded))
    ids = torch.full((len(encoded), width), tok.pad_token_id)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, e in enumerate(encoded):
        ids[row, : len(e)] = torch.tensor(e)
        mask[row, : len(e)] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits.double()
    got = predictor.predict_prompts([critic_prompt(ex) for ex in EXAMPLES], [ex.aspect for ex in EXAMPLES])
    for row, (ex, e) in enumerate(zip(EXAMPLES, encoded, strict=True)):
        want = torch.softmax(logits[row, len(e) - 1, _group_ids(tok, ex.aspect)], dim=0).numpy()
        np.testing.assert_allclose(got[row], want, atol=1e-5)


def test_a_prompt_longer_than_the_model_is_cut_from_the_left(tiny_model_dir):
    predictor = CriticPredictor.load(tiny_model_dir, device="cpu", engine_kind="hf")
    long_example = CriticExample(Aspect.IS_USE, "Summarise.", output="A long story about rain. " * 400)
    (dist,) = predictor.predict([long_example])
    assert predictor.engine.truncated == 1
    assert sum(dist.values()) == pytest.approx(1.0)
