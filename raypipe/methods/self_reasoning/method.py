"""The `self_reasoning` method: retrieve the top-K, generate the self-reasoning trajectory in one pass,
parse it (Self-Reasoning §"Method", Figure 2 bottom; §"Preliminary": y = concat(τ, y*) in a single
pass).

Per batch of requests: one search call, one engine call. Each result's `text` is the short answer
or the analysis (`text: auto` gives long-form requests the analysis), its citations the passages the
trajectory cites (EAP snippets and analysis marks, document numbers mapped back to passage ids), its
trace the parsed trajectory.

- All documents irrelevant (RAP says `Relevant: False`): the model answers from internal knowledge
  in the same pass (§"Relevance-Aware Process"); the result cites nothing and the trace says
  `internal_knowledge`.
- Decoding ends well: generation stops at the end of the first `Final Answer` line (the engines'
  `stop_line` rule, a row at a time), and `frequency_penalty` (0 turns it off) lowers the logits of
  tokens already generated, so a greedy loop ("Tavasvik, Tavasvik, ...") breaks before the token cap.
  Ours: the paper decodes greedily with no word on either (its trained 7B model ends by itself).
- A trajectory that does not parse is answered from its tail (`trajectory_format.answer_tail`), never
  an exception; the trace carries `parse_error`, `parse_reason` and `parse_cause` (`failure_cause`:
  the token cap, in a loop or not, else the parser's reason), and the method counts failures by cause
  (`parse_failures`).
- Fact verification: the student is asked Figure 6's task sentence and the claim, as in training
  (`trajectory_format.task_question`); SUPPORT / REFUTE / NOT ENOUGH INFO map to the eval's
  true / false / false (`trajectory_format.VERDICT_OF_ANSWER` says why).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from raypipe.inference.engines.base import Engine, GenerationParams
from raypipe.methods.base import (
    Citation,
    Method,
    MethodRequest,
    MethodResult,
    Toolkit,
    Variant,
    search_requests,
)
from raypipe.methods.closed_set import Option, match_option
from raypipe.methods.self_reasoning.settings import SelfReasoningSettings, SelfReasoningSweeps
from raypipe.retrieval.perturb import perturbed
from raypipe.retrieval.types import Passage
from raypipe.trajectory_format import (
    ANSWER_FIELD,
    FACT_ANSWERS,
    VERDICT_OF_ANSWER,
    Trajectory,
    TrajectoryParseError,
    answer_tail,
    format_prompt,
    parse_trajectory,
    task_question,
)

logger = logging.getLogger(__name__)

#: the robustness variants of Figure 3 (`eval.sweeps.self_reasoning.robustness`)
ROBUSTNESS = {"shuffled": {"doc_order": "shuffled"}, "noise50": {"noise_fraction": 0.5}}


def question_of(request: MethodRequest) -> str:
    """What the trajectory model is asked, as in the training prompts: for a true/false request Figure
    6's task sentence and the claim (`query`), for another closed-set request its question (`query`),
    else instruction and input."""
    question = request.retrieval_text()
    return task_question("fact", question) if _is_verdict(request.options) else question


def _repeats_at_end(text: str, longest_period: int = 120, span: int = 40) -> bool:
    """Whether `text` ends in a repetition: its last max(3 periods, `span`) characters repeat one unit
    of at most `longest_period` characters (at any phase, as a loop cut by the token cap does)."""
    for period in range(1, min(longest_period, len(text) // 3) + 1):
        tail = text[-max(3 * period, span):]
        if len(tail) >= 3 * period and tail[period:] == tail[:-period]:
            return True
    return False


def failure_cause(reason: str, finish_reason: str, raw: str) -> str:
    """Why a trajectory did not parse, as eval counts it: decoding first (`loop`: it ran into the token
    cap repeating itself; `token_cap`: it ran into the cap otherwise), else the parser's reason
    (`trailing_text`, `unexpected_line` = a field missing or out of order, `truncated` = it ended
    before a field, `empty_field`, `bad_citation`, `bad_answer`, ...)."""
    if finish_reason == "length":
        return "loop" if _repeats_at_end(raw) else "token_cap"
    return reason


def _is_verdict(options: tuple[Option, ...]) -> bool:
    return bool(options) and {o.label for o in options} <= set(VERDICT_OF_ANSWER.values())


def option_of(answer: str, options: tuple[Option, ...]) -> str | None:
    """The option a short answer names: a Figure 6 answer as its verdict (`VERDICT_OF_ANSWER`), else
    the closed-set matcher."""
    verdict = VERDICT_OF_ANSWER.get(answer.strip().upper())
    if verdict is not None and verdict in {o.label for o in options}:
        return verdict
    return match_option(answer, options)


class SelfReasoning(Method[SelfReasoningSettings]):
    """Self-Reasoning decoding with the self-reasoning model's engine and a retriever."""

    name = "self_reasoning"
    settings_type = SelfReasoningSettings
    tool_names = ("engine", "retriever")

    def __init__(self, toolkit: Toolkit):
        super().__init__(toolkit)
        self.engine: Engine = toolkit.get("engine", self.name)
        #: trajectories that did not parse, by cause (`failure_cause`; answered from their tail)
        self.parse_failures: Counter[str] = Counter()
        self.decoded = 0

    def decode(self, requests: Sequence[MethodRequest], settings: SelfReasoningSettings) -> list[MethodResult]:
        if not requests:
            return []
        searcher = perturbed(self.toolkit.get("retriever", self.name), settings)
        found = search_requests(searcher, requests, settings.top_k)
        prompts = [format_prompt(question_of(r), d, self.engine.prompt) for r, d in zip(requests, found, strict=True)]
        params = GenerationParams(max_new_tokens=settings.max_new_tokens, return_probs=False, stop_line=ANSWER_FIELD,
                                  frequency_penalty=settings.frequency_penalty)
        generations = self.engine.generate(prompts, params)
        return [self._result(r, d, g.text, g.finish_reason, settings)
                for r, d, g in zip(requests, found, generations, strict=True)]

    def _result(self, request: MethodRequest, docs: Sequence[Passage], raw: str, finish: str,
                settings: SelfReasoningSettings) -> MethodResult:
        self.decoded += 1
        trace: dict[str, Any] = {"raw": raw, "finish_reason": finish,
                                 "documents": [{"n": i, "id": d.id, "title": d.title} for i, d in enumerate(docs, 1)]}
        answers = FACT_ANSWERS if _is_verdict(request.options) else None
        trajectory: Trajectory | None = None
        try:
            trajectory = parse_trajectory(raw, len(docs), answers, settings.processes)
        except TrajectoryParseError as exc:
            cause = failure_cause(exc.reason, finish, raw)
            self.parse_failures[cause] += 1
            trace.update(parse_error=str(exc), parse_reason=exc.reason, parse_cause=cause, trajectory=None)
            logger.debug("trajectory does not parse (%s); answering from its tail", exc)
        if trajectory is None:
            answer = answer_tail(raw)
            text, citations = answer, []
        else:
            trace.update(trajectory=trajectory.as_dict(), internal_knowledge=not trajectory.relevant)
            answer = trajectory.answer
            long = settings.text == "analysis" or (settings.text == "auto" and request.long_form)
            text = (trajectory.analysis or answer) if long else answer  # no analysis: w/o TAP
            cited = trajectory.cited_docs() if trajectory.relevant else []
            citations = list({docs[n - 1].id: Citation(docs[n - 1].id, docs[n - 1].title) for n in cited}.values())
        result = MethodResult(text=text, citations=citations, n_retrievals=1, trace=trace)
        if request.options:
            result.option = option_of(answer, request.options)
            result.option_scores = {result.option: 1.0} if result.option else {}
        return result

    @classmethod
    def variants(cls, settings: SelfReasoningSettings, sweeps: SelfReasoningSweeps | None = None) -> list[Variant]:
        """The method itself, then Figure 3's robustness settings (shuffled order, 50% noise)."""
        sweeps = sweeps or SelfReasoningSweeps()
        out = [Variant(cls.name, cls.name, "method", cls.name, settings)]
        for name in sweeps.robustness:
            out.append(Variant(f"{cls.name}_{name}", cls.name, "robustness", name,
                               settings.model_copy(update=ROBUSTNESS[name])))
        return out
