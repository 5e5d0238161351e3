"""Eval metrics as the Self-RAG paper computes them (§4.1, App. B.2).

Short-form QA: "accuracy" is answer match, whether a normalized gold answer is contained in the
normalized output (PopQA/TriviaQA, following Mallen et al. 2023), not exact match, which is reported
beside it. Closed-set tasks: accuracy of the option chosen by score aggregation. Instructions that
need no retrieval (arithmetic, string tasks): the exact answer, in the output's own case, and for a
number, the output's last number (so "12 times 3 is 38" is wrong though it contains 12 and 3);
creative instructions have no one answer and are not judged (`correct` None): they count for
retrieval frequency only, which is what that set measures (Self-RAG §3.3, Fig. 3c). Nor are long-form
items (ASQA, bio): their metrics (ALCE's, FactScore) need models that run outside. Retrieval frequency:
the share of questions for which decoding retrieved at least once. No option: the share of closed-set
outputs that name none of the options, which count as wrong; it tells a model that answers off-format
from one that answers wrongly. Long-form generation (biographies, CRAG's Bio): FactScore from the
world's ground truth (raypipe.eval.factscore), not accuracy. CRAG-family methods (crag, selfcrag)
also count what their corrective step did (raypipe.eval.crag_steps: actions, web searches failed or
empty, rewriter and knowledge fallbacks), so an accuracy is never read without it. Self-Reasoning counts its trajectories that parse
(`trajectory_parse_rate`) and, by cause, those that do not (`parse_failures`: the token cap, in a
loop or not, trailing text, a missing field, ...), since an unparsed trajectory is answered from its
tail and its accuracy means less.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from raypipe.eval.crag_steps import CragStep, count_steps
from raypipe.eval.factscore import factscore
from raypipe.eval.released import VERDICTS
from raypipe.eval.significance import accuracy_interval, macro_f1

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_INTEGER = re.compile(r"-?\d+")
_NUMBER_IN_TEXT = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?![\w])")


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (the SQuAD normalization)."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def answer_match(output: str, golds: Iterable[str]) -> bool:
    """A normalized gold answer occurs in the normalized output, on word boundaries."""
    padded = f" {normalize_answer(output)} "
    return any(gold and f" {gold} " in padded for gold in map(normalize_answer, golds))


def exact_match(output: str, golds: Iterable[str]) -> bool:
    normalized = normalize_answer(output)
    return any(normalized == normalize_answer(gold) for gold in golds)


def instruction_match(output: str, golds: Iterable[str]) -> bool:
    """The exact answer of an instruction: an integer gold is the output's last number; any other
    gold occurs in the output as it is written (case kept: "write X in capital letters"), not inside
    a longer word."""
    for gold in golds:
        gold = gold.strip()
        if _INTEGER.fullmatch(gold):
            numbers = _NUMBER_IN_TEXT.findall(output)
            if numbers and numbers[-1].replace(",", "") == gold:
                return True
        elif re.search(rf"(?<!\w){re.escape(gold)}(?!\w)", output):
            return True
    return False


def _exact_cased(output: str, golds: Iterable[str]) -> bool:
    """The whole output is a gold answer, ignoring punctuation and spacing but not case."""
    def norm(text: str) -> str:
        return " ".join(text.translate(_PUNCTUATION).split())

    return any(norm(output) == norm(gold) for gold in golds)


@dataclass(frozen=True)
class Scored:
    """One prediction judged: `correct` by the task's accuracy rule, `exact` by exact match; both None
    for an item with no answer to judge (a creative instruction)."""

    correct: bool | None
    exact: bool | None
    retrieved: bool
    #: mean s_IsSup over the output's segments generated from a passage (None: no such segment)
    is_sup: float | None
    #: closed-set tasks: the output named no option (None: an open-ended task)
    no_option: bool | None = None
    #: long-form tasks: FactScore of the output (None: another task)
    factscore: float | None = None
    #: CRAG-family methods: what the corrective step did (None: no corrective step)
    crag: CragStep | None = None
    #: Self-Reasoning: whether the trajectory parsed (None: another method)
    parsed: bool | None = None
    #: ... and why it did not (None: it parsed, or another method)
    parse_cause: str | None = None
    #: closed-set tasks: the option the output named and the gold one (None: an open-ended task)
    option: str | None = None
    gold_option: str | None = None
    #: closed-set tasks: how many options the item offered (None: an open-ended task)
    n_options: int | None = None


def judge(task: str, golds: tuple[str, ...], choices: dict[str, str], result: dict[str, Any],
          split: Callable[[str], list[str]] | None = None) -> Scored:
    """Score one method result (`MethodResult.as_dict()`) against its golds (for long form: the
    subject's true fact values; `split` is the sentence segmenter FactScore needs); s_IsSup comes
    from a Self-RAG trace's segments (other methods have none)."""
    text = result["text"]
    no_option = None
    fact_score = None
    option = gold_option = None
    n_options = None
    correct: bool | None
    exact: bool | None
    if task == "longform":
        if split is None:
            raise ValueError("judging a long-form result needs a sentence splitter")
        correct = exact = None
        fact_score = factscore(text, golds, split).score
    elif task == "qa":
        correct = answer_match(text, golds)
        exact = exact_match(text, golds)
    elif task == "instruction":
        correct = instruction_match(text, golds) if golds else None
        exact = _exact_cased(text, golds) if golds else None
    elif task == "longform_ref":
        correct = exact = None
    else:
        correct = result["option"] == golds[0]
        exact = exact_match(text, [golds[0], *([choices[golds[0]]] if task == "mc" else [])])
        no_option = result["option"] is None
        option, gold_option = result["option"], golds[0]
        n_options = len(choices) if task == "mc" else len(VERDICTS)
    trace = result.get("trace") or {}
    segments = trace.get("segments", [])
    sup = [s["scores"]["is_sup"] for s in segments if s.get("citation") and "is_sup" in s.get("scores", {})]
    parsed = trace["trajectory"] is not None if "trajectory" in trace else None
    cause = None if parsed is not False else trace.get("parse_cause") or trace.get("parse_reason")
    return Scored(correct, exact, bool(result["retrieved"]), fmean(sup) if sup else None, no_option, fact_score,
                  CragStep.of(trace), parsed, cause, option, gold_option, n_options)


#: a closed-set answer given for more than this share of a set's items, where the golds are not that
#: one-sided, is a collapse (ours: the same rule as D_gen's reflection labels, raypipe.augment.collapse)
COLLAPSE_SHARE = 0.95


def one_sided(share: float, reference_share: float) -> bool:
    """The collapse rule: one value for more than `COLLAPSE_SHARE` of the items (`share`, the most
    frequent value's) where the reference (the golds, or what the documents held) is not that one-sided."""
    return share > COLLAPSE_SHARE >= reference_share


def answer_collapse(scored: list[Scored]) -> dict[str, Any] | None:
    """On a closed-set set (fact verification, multiple choice): the most frequent answer's share and
    the majority-label baseline (always answering the most frequent gold), so that an accuracy that is
    only the baseline reads as such; `collapsed` when one answer covers more than `COLLAPSE_SHARE` of
    the items and the golds do not; chance (the mean of 1 / options) and macro-F1 over the gold labels
    beside them (a set whose labels are 80% one value reads 80% accuracy from a one-answer model, and
    macro-F1 0.44). None for open-ended sets."""
    closed = [s for s in scored if s.gold_option is not None]
    if not closed:
        return None
    answer, answered = Counter(s.option for s in closed).most_common(1)[0]
    gold, gold_count = Counter(s.gold_option for s in closed).most_common(1)[0]
    share, gold_share = answered / len(closed), gold_count / len(closed)
    return {"top_answer": answer, "top_answer_share": share, "majority_label": gold,
            "majority_baseline": gold_share, "collapsed": one_sided(share, gold_share),
            "chance": fmean(1 / s.n_options for s in closed if s.n_options) if any(s.n_options for s in closed) else None,
            "macro_f1": macro_f1([s.option for s in closed], [s.gold_option for s in closed])}


def summarize(scored: list[Scored]) -> dict[str, Any]:
    """accuracy and exact_match over the `judged` items (None if none is) with accuracy's 95% interval
    (`accuracy_interval`, raypipe.eval.significance), retrieval_frequency over
    all `n`, the mean s_IsSup of outputs that used passages (the support the IsSup weight buys, cf. the
    paper's Figure 3b), no_option, over the closed-set items, and factscore, over the long-form
    items (None if there are none); for CRAG-family methods, what the corrective step did (`crag`,
    raypipe.eval.crag_steps.count_steps; None for other methods); for Self-Reasoning, the share of
    trajectories that parse and the others counted by cause (None for other methods); for closed-set
    tasks, the most frequent answer beside the majority-label baseline (`answer_collapse`)."""
    if not scored:
        return {"n": 0, "judged": 0, "accuracy": None, "exact_match": None, "retrieval_frequency": None,
                "is_sup": None, "no_option": None, "factscore": None, "crag": None,
                "trajectory_parse_rate": None, "parse_failures": None, "answers": None, "accuracy_interval": None}
    judged = [s for s in scored if s.correct is not None]
    sup = [s.is_sup for s in scored if s.is_sup is not None]
    closed = [s.no_option for s in scored if s.no_option is not None]
    facts = [s.factscore for s in scored if s.factscore is not None]
    trajectories = [s for s in scored if s.parsed is not None]
    causes = Counter(s.parse_cause or "unknown" for s in trajectories if not s.parsed)
    return {
        "n": len(scored),
        "judged": len(judged),
        "accuracy": fmean(bool(s.correct) for s in judged) if judged else None,
        "accuracy_interval": list(accuracy_interval(sum(bool(s.correct) for s in judged), len(judged)))
        if judged else None,
        "exact_match": fmean(bool(s.exact) for s in judged) if judged else None,
        "retrieval_frequency": fmean(s.retrieved for s in scored),
        "is_sup": fmean(sup) if sup else None,
        "no_option": fmean(closed) if closed else None,
        "factscore": fmean(facts) if facts else None,
        "crag": count_steps(s.crag for s in scored if s.crag is not None),
        "trajectory_parse_rate": fmean(bool(s.parsed) for s in trajectories) if trajectories else None,
        "parse_failures": dict(sorted(causes.items())) if trajectories else None,
        "answers": answer_collapse(scored),
    }
