"""Self-RAG's segment-level beam search with adaptive retrieval (paper §3.3, Algorithm 1, App. A.4),
run in lock step over a batch of requests so that every step is one engine call and one search call.
The `selfrag` method (method.py) runs it over the retriever, Self-CRAG (methods.selfcrag) over CRAG's
processed knowledge.

One step, for every unfinished hypothesis (beam) of every request:
1. decide whether to retrieve: `always`, `never`, or `adaptive` (p(Retrieval) / (p(Retrieval) +
   p(No Retrieval)) > δ, read before the first segment from the prompt and later at the retrieve-group
   token that ended the previous segment);
2. retrieving, search K passages with the query "input + previous segment" (telling the searcher
   whose request it is) and build K continuations
   `prompt + output so far + [Retrieval]<paragraph>title\\ntext</paragraph>`; not retrieving, one
   continuation after `[No Retrieval]` (or the `[Continue to Use Evidence]` the model wrote);
3. generate all continuations of all beams in ONE engine call; a segment ends at the next
   retrieve-group token (the model asks for the next decision), at a utility token, EOS or the
   length cap (those three finish the hypothesis);
4. score each segment (Eq. 3-4): segment probability + w_IsRel s_IsRel + w_IsSup s_IsSup +
   w_IsUse s_IsUse, IsRel read right after the paragraph, IsSup and IsUse where the model wrote them;
   drop continuations that wrote a forbidden token (hard constraints);
5. keep the top B hypotheses, finished ones included, by the mean score of their segments (a mean,
   so that a hypothesis is not preferred for having more segments).
Closed-set requests sum the scores of every finished hypothesis per answer option (App. B.2).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from raypipe.inference.engines.base import Engine, Generation, GenerationParams, GroupTable
from raypipe.methods.base import Citation, MethodRequest, MethodResult
from raypipe.methods.closed_set import aggregate_options
from raypipe.methods.selfrag.scoring import (
    CRITIQUE_GROUPS,
    SegmentScore,
    critique_weights,
    score_segment,
    segment_probability,
    should_retrieve,
)
from raypipe.methods.selfrag.settings import SelfRAGSettings
from raypipe.retrieval.types import Passage, Searcher
from raypipe.tokens import (
    CONTINUE,
    NO_RETRIEVAL,
    RETRIEVAL,
    Group,
    format_paragraph,
    strip_reflection,
)

logger = logging.getLogger(__name__)


@dataclass
class SegmentTrace:
    """One output segment: its text, the passage it was generated from, the reflection-token
    distributions it was scored with (group -> token -> probability) and its scores."""

    text: str
    raw: str
    citation: Citation | None
    reflections: dict[str, dict[str, float]]
    score: SegmentScore

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "raw": self.raw, "citation": asdict(self.citation) if self.citation else None,
                "reflections": self.reflections, "scores": self.score.as_dict()}


@dataclass
class _Hypothesis:
    """A partial output. `raw` is everything after the prompt (paragraphs included); `boundary` is the
    retrieve-group distribution where the last segment stopped, `boundary_token` the token chosen."""

    raw: str = ""
    segments: list[SegmentTrace] = field(default_factory=list)
    boundary: dict[str, float] | None = None
    boundary_token: str | None = None
    finished: bool = False

    @property
    def score(self) -> float:
        return math.fsum(s.score.total for s in self.segments) / len(self.segments) if self.segments else 0.0

    @property
    def text(self) -> str:
        return " ".join(t for s in self.segments if (t := s.text))


@dataclass
class _Search:
    """One request's search; `index` is the request's place in the decode call (what its queries say)."""

    index: int
    request: MethodRequest
    prompt: str
    beams: list[_Hypothesis]
    completed: list[_Hypothesis] = field(default_factory=list)
    n_retrievals: int = 0
    constraints_relaxed: bool = False
    #: the passages of the request's first retrieval (query x) with the generator's s_IsRel of each:
    #: how eval measures whether the critique ranks the gold passage above a look-alike's
    first_retrieval: list[dict[str, Any]] | None = None
    first_parent: _Hypothesis | None = None


@dataclass
class _Expansion:
    search: _Search
    parent: _Hypothesis
    passage: Passage | None
    prefix: str

    @property
    def prompt(self) -> str:
        return self.search.prompt + self.parent.raw + self.prefix


def retrieval_query(request: MethodRequest, previous_segment: str) -> str:
    """Algorithm 1 line 4: retrieve with (x, y_{t-1})."""
    return "\n".join(p for p in (request.retrieval_text(), previous_segment) if p)


class BeamSearch:
    """One decode call of Self-RAG (or of Self-CRAG): the settings, and the search state of its
    requests. `retriever` is searched for every retrieval (None for `mode: never`); `groups` is the
    engine tokenizer's reflection-token table, which a method builds once."""

    def __init__(self, engine: Engine, retriever: Searcher | None, groups: GroupTable, cfg: SelfRAGSettings):
        self.engine, self.retriever, self.groups, self.cfg = engine, retriever, groups, cfg
        self.weights = critique_weights(cfg)
        self.forbid = frozenset(cfg.forbid)
        self.params = GenerationParams(
            max_new_tokens=cfg.max_new_tokens,
            stop_token_ids=tuple(self.groups.ids[Group.RETRIEVE] + self.groups.ids[Group.IS_USE]),
            first_position_groups=(Group.IS_REL,),
        )

    def run(self, requests: Sequence[MethodRequest]) -> list[MethodResult]:
        searches = [_Search(i, r, self.engine.prompt(r.instruction, r.input), [_Hypothesis()])
                    for i, r in enumerate(requests)]
        if self.cfg.mode == "adaptive" and searches:
            first = self.engine.next_group_probs([s.prompt for s in searches], Group.RETRIEVE)
            for search, probs in zip(searches, first, strict=True):
                search.beams[0].boundary = probs
        for _ in range(self.cfg.max_depth):
            work = [(s, h) for s in searches for h in s.beams if not h.finished]
            if not work:
                break
            self._step(work)
        return [self._result(s) for s in searches]

    # --- one step ----------------------------------------------------------------------------------

    def _wants_retrieval(self, h: _Hypothesis) -> bool:
        if self.cfg.mode != "adaptive":
            return self.cfg.mode == "always"
        return h.boundary is not None and should_retrieve(h.boundary, self.cfg.threshold)

    def _step(self, work: list[tuple[_Search, _Hypothesis]]) -> None:
        retrieving = [self._wants_retrieval(h) for _, h in work]
        asking = [(s, h) for (s, h), r in zip(work, retrieving, strict=True) if r]
        queries = [retrieval_query(s.request, h.segments[-1].text if h.segments else "") for s, h in asking]
        found = iter(self.retriever.search(queries, self.cfg.top_k, requests=[s.index for s, _ in asking])
                     if queries else [])
        expansions: list[_Expansion] = []
        for (search, h), retrieve in zip(work, retrieving, strict=True):
            passages = list(next(found)) if retrieve else []
            search.n_retrievals += int(retrieve)
            if retrieve and not passages:
                logger.warning("retrieval found no passages; continuing without retrieval")
            for p in passages:
                expansions.append(_Expansion(search, h, p, RETRIEVAL + format_paragraph(p.title, p.text)))
            if not passages:
                kept = h.boundary_token if h.boundary_token in (NO_RETRIEVAL, CONTINUE) else NO_RETRIEVAL
                expansions.append(_Expansion(search, h, None, kept))
        generations = self.engine.generate([e.prompt for e in expansions], self.params)
        children: dict[int, list[tuple[_Hypothesis, bool]]] = {}
        for e, g in zip(expansions, generations, strict=True):
            child = self._child(e, g)
            children.setdefault(id(e.search), []).append(child)
            _note_first_retrieval(e, child[0])
        for search in {id(s): s for s, _ in work}.values():
            self._select(search, children[id(search)])

    def _child(self, e: _Expansion, g: Generation) -> tuple[_Hypothesis, bool]:
        """The hypothesis `g` extends `e.parent` to, and whether it breaks a hard constraint."""
        last = g.token_ids[-1] if g.token_ids else None
        asks_next = g.finish_reason == "stop" and self.groups.group_of.get(last) is Group.RETRIEVE
        ids, logprobs, raw = g.token_ids, g.token_logprobs, g.text
        boundary_token = boundary = None
        if asks_next:
            boundary_token = self.groups.token_of[last]
            boundary = g.group_probs(Group.RETRIEVE, position=len(ids) - 1)
            ids, logprobs, raw = ids[:-1], logprobs[:-1], raw[: len(raw) - len(boundary_token)]
        read = {group: g.group_probs(group) for group in CRITIQUE_GROUPS}
        read[Group.IS_REL] = g.group_probs(Group.IS_REL, position=0) if e.passage is not None else None
        score = score_segment(segment_probability(logprobs, self.cfg.segment_prob), read, self.weights)
        reflections = {group.value: probs for group, probs in read.items() if probs is not None}
        if e.parent.boundary is not None and self.cfg.mode == "adaptive":
            reflections[Group.RETRIEVE.value] = e.parent.boundary
        citation = Citation(e.passage.id, e.passage.title) if e.passage is not None else None
        # the segment's own tokens: the retrieve decision and what the model wrote, not the passage
        shown = (RETRIEVAL if e.passage is not None else e.prefix) + raw
        segment = SegmentTrace(strip_reflection(raw).strip(), shown, citation, reflections, score)
        child = _Hypothesis(raw=e.parent.raw + e.prefix + raw, segments=[*e.parent.segments, segment],
                            boundary=boundary, boundary_token=boundary_token, finished=not asks_next)
        broken = any(self.groups.token_of.get(t) in self.forbid for t in ids)
        return child, broken

    def _select(self, search: _Search, children: list[tuple[_Hypothesis, bool]]) -> None:
        """Top-B of the finished beams and the new children that keep the hard constraints."""
        allowed = [c for c, broken in children if not broken]
        search.completed.extend(c for c in allowed if c.finished)
        pool = [h for h in search.beams if h.finished] + allowed
        if not pool:
            search.constraints_relaxed = True
            pool = [c for c, _ in children]
            search.completed.extend(c for c in pool if c.finished)
        search.beams = sorted(pool, key=lambda h: h.score, reverse=True)[: self.cfg.beam_width]

    def _result(self, search: _Search) -> MethodResult:
        """The best hypothesis; its trace holds the raw output, its segments with their reflection
        distributions and scores, and whether hard constraints were relaxed (every continuation of
        some step broke one, so they were kept rather than return nothing)."""
        best = search.beams[0]
        trace = {"raw": best.raw, "score": best.score, "segments": [s.as_dict() for s in best.segments],
                 "constraints_relaxed": search.constraints_relaxed}
        if search.first_retrieval is not None:
            trace["first_retrieval"] = search.first_retrieval
        result = MethodResult(text=best.text, citations=[s.citation for s in best.segments if s.citation],
                              n_retrievals=search.n_retrievals, trace=trace)
        if search.request.options:
            candidates = search.completed + [h for h in search.beams if not h.finished]
            answer = aggregate_options(((h.text, h.score) for h in candidates), search.request.options)
            result.option, result.option_scores = answer.option, answer.scores
        return result


def _note_first_retrieval(e: _Expansion, child: _Hypothesis) -> None:
    """Record `e`'s passage and the s_IsRel its continuation read, if `e` belongs to the first
    retrieval of its request (one parent's K passages: the first that retrieved, the best-ranked
    when several beams retrieve in that step)."""
    search = e.search
    if e.passage is None or (search.first_retrieval is not None and search.first_parent is not e.parent):
        return
    if search.first_retrieval is None:
        search.first_retrieval, search.first_parent = [], e.parent
    search.first_retrieval.append({"passage_id": e.passage.id, "title": e.passage.title,
                                   "is_rel": child.segments[-1].score.critique.get(Group.IS_REL)})
