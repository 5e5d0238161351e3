"""Self-RAG Algorithm 3 (App. A.3) as batch functions: each takes a column batch and returns it with
the `state` column advanced by one step.

The functions take their models as arguments (a critic with `predict(examples) -> probabilities` and
a retriever with `search(queries, k) -> hits`), so they run the same in a unit test with scripted
fakes, in a plain loop, and inside Ray Data actors (pipeline.py). Every critic call of a stage is one
batched call over all rows, segments and passages of the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from raypipe import tokens as T
from raypipe.augment.state import InstanceState, SegmentState, seeded_uniform
from raypipe.prompts import Aspect, CriticExample, task_input
from raypipe.retrieval.types import Passage, Searcher

Batch = dict[str, np.ndarray]

#: Columns that take a row out of the stream: its reject reason ("" for a row that goes on), the field
#: and a detail with the size or the cause. Validation sets them, segmentation may; later steps skip
#: such rows (pipeline._on_good_rows) and the driver writes them to rejects/.
REJECT, REJECT_FIELD, REJECT_DETAIL = "reject_reason", "reject_field", "reject_detail"


class Critic(Protocol):
    def predict(self, examples: list[CriticExample]) -> list[dict[str, float]]: ...


def _states(batch: Batch) -> list[InstanceState]:
    raw = batch.get("state")
    n = len(batch["id"])
    return [InstanceState.from_json(raw[i] if raw is not None else None) for i in range(n)]


def store_states(batch: Batch, states: Sequence[InstanceState]) -> Batch:
    out = dict(batch)
    out["state"] = np.array([s.to_json() for s in states], dtype=object)
    return out


def _x(batch: Batch, i: int) -> str:
    return task_input(str(batch["instruction"][i]), str(batch["input"][i]))


def _argmax(probs: dict[str, float]) -> str:
    return max(probs.items(), key=lambda kv: kv[1])[0]


#: Decimals kept of scores and probabilities in the state. Batched matrix products differ in the last
#: bits with the batch's shape; rounding keeps a resumed run (other batches) byte-identical.
DECIMALS = 5


def _to_passage(hit: Passage) -> Passage:
    """The hit as the state records it: its score rounded (and fields made plain, whatever a stand-in
    searcher returned)."""
    return Passage(id=str(hit.id), title=str(hit.title), text=str(hit.text),
                   score=round(float(hit.score), DECIMALS))


def _ask(critic: Critic, jobs: list[tuple[Any, CriticExample]], apply: Callable[[Any, str], None]) -> None:
    """One batched critic call; `apply(handle, label)` writes each argmax label back."""
    if not jobs:
        return
    probs = critic.predict([ex for _, ex in jobs])
    for (handle, _), p in zip(jobs, probs, strict=True):
        apply(handle, _argmax(p))


# --- a. retrieve decision on the input ----------------------------------------------------------


def decide_retrieval(batch: Batch, critic: Critic) -> Batch:
    """Retrieve given the input only (App. D Table 8)."""
    states = _states(batch)
    examples = [
        CriticExample(aspect=Aspect.RETRIEVE_INPUT, instruction=str(batch["instruction"][i]),
                      input=str(batch["input"][i]))
        for i in range(len(states))
    ]
    for state, probs in zip(states, critic.predict(examples) if examples else [], strict=True):
        state.retrieve_probs = {k: round(float(v), DECIMALS) for k, v in probs.items()}
        state.retrieve = _argmax(probs) == T.RETRIEVAL
    return store_states(batch, states)


# --- b. the retrieval branch ---------------------------------------------------------------------


def segment_outputs(batch: Batch, split_many: Callable[[list[str]], list[list[str]]],
                    max_sentences: int | None = None) -> Batch:
    """Split outputs into sentences (lossless: "".join(segments) == output). Rows that need no
    retrieval keep their whole output as one segment: they only get IsUse.

    With `max_sentences`, an output of more sentences is rejected (`too_many_sentences`, with its
    count) instead: every sentence costs a retrieval and several critic calls, so one such row would
    hold its whole shard (limits.max_output_sentences)."""
    states = _states(batch)
    todo = [i for i, s in enumerate(states) if s.retrieve]
    pieces = split_many([str(batch["output"][i]) for i in todo]) if todo else []
    over: dict[int, int] = {}
    for i, segs in zip(todo, pieces, strict=True):
        texts = [t for t in segs if t]
        if max_sentences is not None and len(texts) > max_sentences:
            over[i] = len(texts)
            continue
        states[i].segments = [SegmentState(text=t) for t in texts]
    for i, s in enumerate(states):
        if not s.retrieve:
            s.segments = [SegmentState(text=str(batch["output"][i]))]
    out = store_states(batch, states)
    if max_sentences is not None:
        n = len(states)
        out[REJECT] = np.array(["too_many_sentences" if i in over else "" for i in range(n)], dtype=object)
        out[REJECT_FIELD] = np.array(["output" if i in over else "" for i in range(n)], dtype=object)
        out[REJECT_DETAIL] = np.array(
            [f"'output' has {over[i]:,} sentences (limit {max_sentences:,})" if i in over else ""
             for i in range(n)], dtype=object)
    return out


def first_retrieval(batch: Batch, retriever: Searcher, k: int) -> Batch:
    """Top-K passages for the whole output (query = input + output): the first is the evidence the
    segments' Retrieve is judged against, and all K are offered where a segment continues it."""
    states = _states(batch)
    todo = [i for i, s in enumerate(states) if s.retrieve]
    queries = [f"{_x(batch, i)}\n{batch['output'][i]}" for i in todo]
    hits = retriever.search(queries, k) if queries else []
    for i, h in zip(todo, hits, strict=True):
        states[i].initial_passages = [_to_passage(x) for x in h]
    return store_states(batch, states)


def decide_segments(batch: Batch, critic: Critic) -> Batch:
    """Three-way Retrieve per segment given the input, preceding segments and the first evidence."""
    states = _states(batch)
    jobs: list[tuple[SegmentState, CriticExample]] = []
    for i, s in enumerate(states):
        if not s.retrieve:
            continue
        evidence = s.first_evidence.text_for_model() if s.first_evidence else None
        for t, seg in enumerate(s.segments):
            preceding = "".join(x.text for x in s.segments[:t]).strip()
            jobs.append((seg, CriticExample(
                aspect=Aspect.RETRIEVE, instruction=str(batch["instruction"][i]),
                input=str(batch["input"][i]), output=seg.text.strip(), evidence=evidence,
                preceding=preceding)))
    _ask(critic, jobs, lambda seg, label: setattr(seg, "decision", label))
    return store_states(batch, states)


def rendered_decisions(decisions: Sequence[str | None], has_first_evidence: bool) -> list[str | None]:
    """An output's per-segment Retrieve labels as D_gen holds them: a segment judged [Continue to Use
    Evidence] before any passage has been inserted becomes a retrieval there (of the initial top-K,
    `retrieve_segments`) rather than continuing evidence that was never inserted."""
    out: list[str | None] = []
    inserted = False
    for decision in decisions:
        if decision == T.CONTINUE and not inserted and has_first_evidence:
            decision = T.RETRIEVAL
            inserted = True
        elif decision == T.RETRIEVAL:
            inserted = True
        out.append(decision)
    return out


def retrieve_segments(batch: Batch, retriever: Searcher, k: int) -> Batch:
    """Top-K passages for every segment that needs new evidence (query = input + segment).

    A segment that continues the first evidence before any was inserted (`rendered_decisions`) is
    offered the initial top-K instead, judged and chosen from like any retrieval's (our choice: App. A.2
    does not say what such a segment inserts). Offering only the first passage would leave the
    short rows (one-sentence answers, judged [Continue]) with nothing to judge [Irrelevant], so the
    generator would never see a look-alike's passage rejected."""
    states = _states(batch)
    jobs: list[tuple[SegmentState, str]] = []
    for i, s in enumerate(states):
        if not s.retrieve:
            continue
        rendered = rendered_decisions([seg.decision for seg in s.segments], s.first_evidence is not None)
        for seg, decision in zip(s.segments, rendered, strict=True):
            if decision == T.RETRIEVAL and seg.decision == T.CONTINUE:
                seg.decision = T.RETRIEVAL
                seg.passages = list(s.initial_passages)
            elif decision == T.RETRIEVAL:
                jobs.append((seg, f"{_x(batch, i)}\n{seg.text.strip()}"))
    hits = retriever.search([q for _, q in jobs], k) if jobs else []
    for (seg, _), h in zip(jobs, hits, strict=True):
        seg.passages = [_to_passage(x) for x in h]
    return store_states(batch, states)


def critique_passages(batch: Batch, critic: Critic, seed: int) -> Batch:
    """IsRel for each passage, IsSup for the relevant ones, then choose the passage (App. A.3):
    relevant and fully/partially supported, highest retrieval score first; otherwise a seeded random
    one."""
    states = _states(batch)
    rel_jobs: list[tuple[tuple[SegmentState, int], CriticExample]] = []
    for i, s in enumerate(states):
        for seg in s.segments:
            seg.is_rel = [""] * len(seg.passages)
            seg.is_sup = [None] * len(seg.passages)
            for j, p in enumerate(seg.passages):
                rel_jobs.append(((seg, j), CriticExample(
                    aspect=Aspect.IS_REL, instruction=str(batch["instruction"][i]),
                    input=str(batch["input"][i]), evidence=p.text_for_model())))

    def set_rel(handle: tuple[SegmentState, int], label: str) -> None:
        handle[0].is_rel[handle[1]] = label

    _ask(critic, rel_jobs, set_rel)

    sup_jobs: list[tuple[tuple[SegmentState, int], CriticExample]] = []
    for i, s in enumerate(states):
        for t, seg in enumerate(s.segments):
            preceding = "".join(x.text for x in s.segments[:t]).strip()
            for j, p in enumerate(seg.passages):
                if seg.is_rel[j] == T.RELEVANT:
                    sup_jobs.append(((seg, j), CriticExample(
                        aspect=Aspect.IS_SUP, instruction=str(batch["instruction"][i]),
                        input=str(batch["input"][i]), output=seg.text.strip(), evidence=p.text_for_model(),
                        preceding=preceding)))

    def set_sup(handle: tuple[SegmentState, int], label: str) -> None:
        handle[0].is_sup[handle[1]] = label

    _ask(critic, sup_jobs, set_sup)

    for i, s in enumerate(states):
        for t, seg in enumerate(s.segments):
            if seg.passages:
                _choose(seg, s, seed, str(batch["id"][i]), t)
    return store_states(batch, states)


def _choose(seg: SegmentState, state: InstanceState, seed: int, row_id: str, t: int) -> None:
    good = [
        j for j in range(len(seg.passages))
        if seg.is_rel[j] == T.RELEVANT and seg.is_sup[j] in (T.FULLY_SUPPORTED, T.PARTIALLY_SUPPORTED)
    ]
    if good:
        seg.chosen = max(good, key=lambda j: seg.passages[j].score)
        seg.chosen_by = "best"
    else:
        u = seeded_uniform(seed, row_id, "passage", t)
        state.random_draws[f"passage[{t}]"] = u
        seg.chosen = int(u * len(seg.passages))
        seg.chosen_by = "random"


# --- utility, for both branches ------------------------------------------------------------------


def judge_utility(batch: Batch, critic: Critic) -> Batch:
    """IsUse given input and the whole output (perceived utility, independent of passages)."""
    states = _states(batch)
    jobs = [
        (s, CriticExample(aspect=Aspect.IS_USE, instruction=str(batch["instruction"][i]),
                          input=str(batch["input"][i]), output=str(batch["output"][i])))
        for i, s in enumerate(states)
    ]
    _ask(critic, jobs, lambda s, label: setattr(s, "utility", label))
    return store_states(batch, states)


# --- the augmented output ------------------------------------------------------------------------


def _copy_segment(state: InstanceState, offered: Callable[[str, str | None], bool]) -> tuple[int, int] | None:
    """(segment, passage) of a row's copy: the first segment that inserts a [Relevant] passage and
    was offered another whose (IsRel, IsSup) labels are `offered`; of those, the best-scored, which is
    the most confusable (a namesake's passage ranks high because it shares the name)."""
    if not state.retrieve:
        return None
    for t, seg in enumerate(state.segments):
        if seg.decision != T.RETRIEVAL or seg.chosen is None or seg.is_rel[seg.chosen] != T.RELEVANT:
            continue
        others = [j for j, (rel, sup) in enumerate(zip(seg.is_rel, seg.is_sup, strict=True))
                  if j != seg.chosen and offered(rel, sup)]
        if others:
            return t, max(others, key=lambda j: seg.passages[j].score)
    return None


def contrast_segment(state: InstanceState) -> tuple[int, int] | None:
    """Where a row's contrast copy swaps passages: beside a chosen [Relevant] one, a rejected one."""
    return _copy_segment(state, lambda rel, _sup: rel == T.IRRELEVANT)


def unsupported_segment(state: InstanceState) -> tuple[int, int] | None:
    """Where a row's unsupported copy swaps passages: beside a chosen [Relevant] one, another judged
    [Relevant] that does not support the segment (the subject's passage stating another fact)."""
    return _copy_segment(state, lambda rel, sup: rel == T.RELEVANT and sup == T.NO_SUPPORT)


def _render_swapped(state: InstanceState, where: tuple[int, int]) -> str:
    t, j = where
    segments = [replace(seg) for seg in state.segments]
    segments[t] = replace(segments[t], chosen=j)
    return render(replace(state, segments=segments))


def render_contrast(state: InstanceState) -> str:
    """The row once more, with `contrast_segment`'s rejected passage inserted (its [Irrelevant], no
    IsSup, as D_gen writes any irrelevant passage) and the same text: what the generator should say
    of a namesake's passage before answering from what it knows."""
    where = contrast_segment(state)
    if where is None:
        raise ValueError("render_contrast: the row offers no rejected passage beside a chosen relevant one")
    return _render_swapped(state, where)


def render_unsupported(state: InstanceState) -> str:
    """The row once more, with `unsupported_segment`'s passage inserted ([Relevant], the same text,
    then [No support / Contradictory]): the generator's IsSup has to read the passage against the
    segment. App. A.2 prefers a supporting passage wherever there is one, so on a world whose outputs
    restate its passages nearly every written IsSup is [Fully supported] and the generator learns a
    constant (docs/augmentation.md gives the demo's counts), which leaves Eq. 4's IsSup weight nothing
    to weigh."""
    where = unsupported_segment(state)
    if where is None:
        raise ValueError("render_unsupported: the row offers no unsupporting relevant passage beside a chosen one")
    return _render_swapped(state, where)


def render(state: InstanceState) -> str:
    """The augmented output string; valid under tokens.parse by construction (tested)."""
    segments: list[T.Segment] = []
    for seg in state.segments:
        # The whitespace between sentences goes after the critique token ("A.[Fully supported] B."),
        # so strip_reflection() of the result gives back the original output exactly.
        text = seg.text.rstrip()
        tail = seg.text[len(text):]
        if not state.retrieve:
            segments.append(T.Segment(text=text, tail=tail, retrieve=T.NO_RETRIEVAL))
        elif seg.decision == T.RETRIEVAL and seg.chosen is not None:
            p = seg.passages[seg.chosen]
            segments.append(T.Segment(
                text=text, tail=tail, retrieve=T.RETRIEVAL, paragraph=p.text_for_model(),
                is_rel=seg.is_rel[seg.chosen], is_sup=seg.is_sup[seg.chosen]))
        elif seg.decision == T.CONTINUE:
            segments.append(T.Segment(text=text, tail=tail, retrieve=T.CONTINUE))
        else:
            # [No Retrieval], or a retrieval that found nothing to insert
            segments.append(T.Segment(text=text, tail=tail, retrieve=T.NO_RETRIEVAL))
    return T.format_output(T.AugmentedOutput(segments=segments, utility=state.utility))
