"""The oracle teacher: the synthetic world's ground truth, with GPT-4-like noise.

It plays GPT-4's part of Self-RAG §3.2.1 offline. The world records, per instance, whether the input
needs retrieval, which passages support which output sentence (fully or partly), which passages are
relevant, and the output's utility; the rules below (the world contract, ARCHITECTURE.md §5) turn that
into the token GPT-4 would ideally answer. The paper's manual check found GPT-4 agreeing with humans
90-95% of the time (App. A.1), so a configurable `error_rate` swaps the true token for a random other
token of the aspect. The swap is a function of (seed, request id) only: the same request gets the same
label whatever the call order or batch split.
"""

from __future__ import annotations

import logging
from typing import Any

from raypipe import tokens
from raypipe.critic.teachers import LabelRequest, Teacher
from raypipe.data.stable_random import stable_uniforms
from raypipe.errors import DataError
from raypipe.prompts import ASPECT_LABELS, Aspect

logger = logging.getLogger(__name__)

_SUPPORT_TOKEN = {"full": tokens.FULLY_SUPPORTED, "partial": tokens.PARTIALLY_SUPPORTED}


def _field(meta: dict[str, Any], key: str, request: LabelRequest) -> Any:
    if key not in meta:
        raise DataError("the oracle teacher needs this ground-truth field in the instance meta",
                        row_id=request.instance_id, field=f"meta.{key}")
    return meta[key]


def _sentence(request: LabelRequest) -> dict[str, Any]:
    sentences = _field(request.meta, "sentences", request)
    i = request.sentence_idx
    if i is None or not 0 <= i < len(sentences):
        raise DataError(f"sentence index {i} outside the {len(sentences)} sentences of the ground truth",
                        row_id=request.instance_id, field="meta.sentences")
    return sentences[i]


def _passage(request: LabelRequest) -> str:
    if request.passage_id is None:
        raise DataError(f"a {request.aspect.value} request needs an evidence passage id",
                        row_id=request.instance_id, field="passage_id")
    return request.passage_id


def stated_values(meta: dict[str, Any]) -> set[str]:
    """The fact values the output's sentences state (the world contract's `sentences[].facts`)."""
    return {str(v) for s in meta.get("sentences") or [] for v in s.get("facts", [])}


def true_label(request: LabelRequest) -> str:
    """The noise-free token for a request, by the world contract's rules."""
    aspect = request.aspect
    if aspect is Aspect.RETRIEVE_INPUT:
        needs = _field(request.meta, "needs_retrieval", request)
        return tokens.RETRIEVAL if needs else tokens.NO_RETRIEVAL
    if aspect is Aspect.RETRIEVE:
        sentence = _sentence(request)
        if not sentence.get("needs_retrieval", False):
            return tokens.NO_RETRIEVAL
        full = sentence.get("support", {}).get(_passage(request)) == "full"
        return tokens.CONTINUE if full else tokens.RETRIEVAL
    if aspect is Aspect.IS_REL:
        relevant = _field(request.meta, "relevant_passages", request)
        return tokens.RELEVANT if _passage(request) in relevant else tokens.IRRELEVANT
    if aspect is Aspect.IS_SUP:
        support = _sentence(request).get("support", {}).get(_passage(request))
        return _SUPPORT_TOKEN.get(support, tokens.NO_SUPPORT)
    if aspect is Aspect.IS_USE:
        answer = request.meta.get("answer")
        if answer is not None and str(answer) not in stated_values(request.meta):
            # a question's output that states none of its answer: on topic but no answer, the world's
            # [Utility:2] (an imperfect factual_qa instance, or a question with a swapped output)
            return tokens.utility_token(2)
        utility = _field(request.meta, "utility", request)
        try:
            return tokens.utility_token(int(utility))
        except (TypeError, ValueError) as exc:
            raise DataError(f"utility must be an integer 1..5, got {utility!r}",
                            row_id=request.instance_id, field="meta.utility") from exc
    raise ValueError(f"unknown aspect {aspect!r}")


class CriticOracle(Teacher):
    """Ground-truth labels; each replaced with probability `error_rate` by another label of the
    aspect, chosen uniformly, deterministically per (seed, request id)."""

    def __init__(self, error_rate: float = 0.0, seed: int = 0):
        super().__init__()
        if not 0.0 <= error_rate <= 1.0:
            raise ValueError(f"error_rate must be in [0, 1], got {error_rate}")
        self.error_rate = error_rate
        self.seed = seed

    def _noisy(self, request: LabelRequest, label: str) -> str:
        flip, pick = stable_uniforms(f"{self.seed}|{request.id}", 2)
        if flip >= self.error_rate:
            return label
        others = [t for t in ASPECT_LABELS[request.aspect] if t != label]
        return others[int(pick * len(others))]

    def label(self, aspect: Aspect, requests: list[LabelRequest]) -> list[str | None]:
        self.check_aspect(aspect, requests)
        return [self._noisy(r, true_label(r)) for r in requests]
