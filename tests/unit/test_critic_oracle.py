"""The oracle teacher: the world contract's rules, and noise that depends only on (seed, request id)."""

from __future__ import annotations

import pytest

from raypipe import tokens
from raypipe.critic.oracle import CriticOracle
from raypipe.critic.teachers import LabelRequest
from raypipe.errors import DataError
from raypipe.prompts import ASPECT_LABELS, Aspect, CriticExample

META = {
    "needs_retrieval": True,
    "sentences": [
        {"text": "A is a painter.", "needs_retrieval": True, "support": {"p1": "full", "p2": "partial"}},
        {"text": "She is great.", "needs_retrieval": False, "support": {}},
    ],
    "relevant_passages": ["p1", "p2"],
    "utility": 4,
}
EVIDENCE = "Title\ntext"


def _request(aspect: Aspect, sentence: int | None = None, passage: str | None = None, meta=META,
             instance: str = "i1") -> LabelRequest:
    fields = {
        Aspect.RETRIEVE_INPUT: {},
        Aspect.RETRIEVE: {"output": "x", "evidence": EVIDENCE},
        Aspect.IS_REL: {"evidence": EVIDENCE},
        Aspect.IS_SUP: {"output": "x", "evidence": EVIDENCE},
        Aspect.IS_USE: {"output": "x"},
    }[aspect]
    return LabelRequest(aspect, CriticExample(aspect, "Tell me about A.", **fields), instance, meta,
                        sentence_idx=sentence, passage_id=passage)


@pytest.mark.parametrize(
    ("aspect", "sentence", "passage", "meta_patch", "expected"),
    [
        (Aspect.RETRIEVE_INPUT, None, None, {}, tokens.RETRIEVAL),
        (Aspect.RETRIEVE_INPUT, None, None, {"needs_retrieval": False}, tokens.NO_RETRIEVAL),
        (Aspect.RETRIEVE, 0, "p1", {}, tokens.CONTINUE),
        (Aspect.RETRIEVE, 0, "p2", {}, tokens.RETRIEVAL),
        (Aspect.RETRIEVE, 0, "p9", {}, tokens.RETRIEVAL),
        (Aspect.RETRIEVE, 1, "p1", {}, tokens.NO_RETRIEVAL),
        (Aspect.IS_REL, 0, "p2", {}, tokens.RELEVANT),
        (Aspect.IS_REL, 0, "p9", {}, tokens.IRRELEVANT),
        (Aspect.IS_SUP, 0, "p1", {}, tokens.FULLY_SUPPORTED),
        (Aspect.IS_SUP, 0, "p2", {}, tokens.PARTIALLY_SUPPORTED),
        (Aspect.IS_SUP, 0, "p9", {}, tokens.NO_SUPPORT),
        (Aspect.IS_SUP, 1, "p1", {}, tokens.NO_SUPPORT),
        (Aspect.IS_USE, None, None, {}, "[Utility:4]"),
        (Aspect.IS_USE, None, None, {"utility": 1}, "[Utility:1]"),
        # a question's output: its recorded utility when a sentence states the answer, else no answer
        (Aspect.IS_USE, None, None, {"answer": "1901", "sentences": [{"facts": ["1901"]}]}, "[Utility:4]"),
        (Aspect.IS_USE, None, None, {"answer": "1901", "sentences": [{"facts": ["Oslo"]}], "utility": None},
         "[Utility:2]"),
    ],
)
def test_rules_of_the_world_contract(aspect, sentence, passage, meta_patch, expected):
    request = _request(aspect, sentence, passage, {**META, **meta_patch})
    assert CriticOracle(error_rate=0.0).label(aspect, [request]) == [expected]


def _many(aspect: Aspect = Aspect.IS_SUP, n: int = 2000) -> list[LabelRequest]:
    return [_request(aspect, 0, "p1", instance=f"i{k}") for k in range(n)]


def test_error_rate_one_never_keeps_the_true_label():
    labels = CriticOracle(error_rate=1.0, seed=3).label(Aspect.IS_SUP, _many(n=300))
    assert tokens.FULLY_SUPPORTED not in labels
    assert set(labels) == {tokens.PARTIALLY_SUPPORTED, tokens.NO_SUPPORT}


def test_error_rate_flips_about_that_share_to_other_labels_of_the_group():
    labels = CriticOracle(error_rate=0.2, seed=1).label(Aspect.IS_USE, _many(Aspect.IS_USE))
    flipped = [x for x in labels if x != "[Utility:4]"]
    assert 0.16 < len(flipped) / len(labels) < 0.24
    assert set(flipped) == set(ASPECT_LABELS[Aspect.IS_USE]) - {"[Utility:4]"}


def test_noise_is_independent_of_order_and_batching():
    requests = _many(n=400)
    teacher = CriticOracle(error_rate=0.3, seed=5)
    whole = dict(zip([r.id for r in requests], teacher.label(Aspect.IS_SUP, requests), strict=True))
    reversed_requests = requests[::-1]
    in_pieces = [label for start in range(0, 400, 7)
                 for label in CriticOracle(error_rate=0.3, seed=5).label(
                     Aspect.IS_SUP, reversed_requests[start:start + 7])]
    assert dict(zip([r.id for r in reversed_requests], in_pieces, strict=True)) == whole


def test_seed_changes_which_labels_are_noisy():
    requests = _many(n=400)
    a = CriticOracle(error_rate=0.3, seed=1).label(Aspect.IS_SUP, requests)
    b = CriticOracle(error_rate=0.3, seed=2).label(Aspect.IS_SUP, requests)
    assert a != b


def test_missing_ground_truth_names_the_row_and_field():
    meta = {k: v for k, v in META.items() if k != "utility"}
    with pytest.raises(DataError) as err:
        CriticOracle().label(Aspect.IS_USE, [_request(Aspect.IS_USE, meta=meta, instance="row-7")])
    assert err.value.row_id == "row-7" and err.value.field == "meta.utility"


def test_requests_of_another_aspect_are_refused():
    with pytest.raises(ValueError, match="another aspect"):
        CriticOracle().label(Aspect.IS_REL, [_request(Aspect.IS_USE)])


def test_request_id_names_instance_aspect_sentence_and_passage():
    assert _request(Aspect.IS_SUP, 2, "p7", instance="x").id == "x|is_sup|2|p7"
    assert _request(Aspect.IS_USE, instance="x").id == "x|is_use|-|-"
    swapped = LabelRequest(Aspect.IS_USE, CriticExample(Aspect.IS_USE, "q", output="y"), "x", output_of="z")
    assert swapped.id == "x|is_use|-|-|z"
