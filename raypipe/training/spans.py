"""Span kinds: named rules that find character spans of a training example to exclude from the loss.

A training stage names the span kinds it masks (``TrainStage.mask``), so the critic, the generator and
Self-Reasoning's gradual stages share one encoder and differ only in data:

- Self-RAG Eq. 1 (critic): ``["prompt"]``, the loss is on the reflection-token target only.
- Self-RAG Eq. 2 (generator): ``["prompt", "paragraph"]``, retrieved passages are inputs, not
  predictions. Each ``<paragraph>...</paragraph>`` is masked on its own; the markers stay in the loss
  (the model must learn to open and close a passage) and so does the text between two passages.
- Self-Reasoning §"Model Training" (gradual learning): stage 1 masks the EAP and TAP trajectories
  (``["prompt", "evidence", "analysis"]``), stage 2 the TAP one (``["prompt", "analysis"]``), stage 3
  nothing but the prompt.

A finder gets the prompt and the target and returns ``[start, end)`` offsets into ``prompt + target``.
New kinds are added with :func:`register_span_kind`.
"""

from __future__ import annotations

from collections.abc import Callable

from raypipe.tokens import PARAGRAPH_CLOSE, PARAGRAPH_OPEN
from raypipe.trajectory_format import PROCESS_START, process_span

Span = tuple[int, int]
SpanFinder = Callable[[str, str], list[Span]]

SPAN_KINDS: dict[str, SpanFinder] = {}


class SpanFormatError(ValueError):
    """A target whose markup cannot be split into spans (e.g. an unclosed ``<paragraph>``)."""


def register_span_kind(name: str) -> Callable[[SpanFinder], SpanFinder]:
    """Register a finder under `name` so a stage's ``mask`` list can name it."""

    def add(finder: SpanFinder) -> SpanFinder:
        if name in SPAN_KINDS:
            raise ValueError(f"span kind {name!r} is already registered")
        SPAN_KINDS[name] = finder
        return finder

    return add


def find_spans(kinds: list[str], prompt: str, target: str) -> list[Span]:
    """The spans of every kind in `kinds`, sorted; a kind with no occurrence contributes nothing."""
    unknown = [k for k in kinds if k not in SPAN_KINDS]
    if unknown:
        raise KeyError(f"unknown span kind(s) {unknown}; known: {sorted(SPAN_KINDS)}")
    return sorted(span for kind in kinds for span in SPAN_KINDS[kind](prompt, target))


@register_span_kind("prompt")
def prompt_span(prompt: str, target: str) -> list[Span]:
    return [(0, len(prompt))] if prompt else []


@register_span_kind("paragraph")
def paragraph_spans(prompt: str, target: str) -> list[Span]:
    """The content of every ``<paragraph>...</paragraph>`` in the target, markers excluded.

    Self-RAG's released ``finetune.py`` masks from the first ``<paragraph>`` to the last
    ``</paragraph>``, which also hides the sentences and reflection tokens between two passages; each
    passage is matched with its own closing marker here.
    """
    spans: list[Span] = []
    base = len(prompt)
    pos = 0
    while (start := target.find(PARAGRAPH_OPEN, pos)) >= 0:
        content = start + len(PARAGRAPH_OPEN)
        end = target.find(PARAGRAPH_CLOSE, content)
        nested = target.find(PARAGRAPH_OPEN, content)
        if end < 0 or 0 <= nested < end:
            raise SpanFormatError(f"{PARAGRAPH_OPEN} at character {start} of the target is not closed")
        spans.append((base + content, base + end))
        pos = end + len(PARAGRAPH_CLOSE)
    stray = target.find(PARAGRAPH_CLOSE, pos)
    if stray >= 0:
        raise SpanFormatError(f"{PARAGRAPH_CLOSE} at character {stray} of the target has no opening marker")
    return spans


# --- Self-Reasoning trajectories -----------------------------------------------------------------
# One span per process of a self-reasoning trajectory (RAP `relevance`, EAP `evidence`, TAP `analysis`);
# the field labels and the process boundaries live in raypipe.trajectory_format.


def _process(process: str) -> SpanFinder:
    def finder(prompt: str, target: str) -> list[Span]:
        span = process_span(process, target)
        return [] if span is None else [(len(prompt) + span[0], len(prompt) + span[1])]

    return finder


for _kind in PROCESS_START:
    register_span_kind(_kind)(_process(_kind))
