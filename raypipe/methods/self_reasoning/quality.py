"""Quality control of generated trajectories (Self-Reasoning Algorithm 1) and the citation metrics it
uses (ALCE's citation recall and precision, Gao et al. 2023b), with a pluggable support checker.

Algorithm 1, per sample: keep it if its answer is correct (program P) and, for a long-form sample,
its citation recall ≥ δ_r and citation precision ≥ δ_p (the paper: 0.8 and 0.8). The same citation
metrics score the method's long-form answers in eval.

ALCE, per statement (sentence) of the answer: recall is 1 if the statement has citations and their
documents together support it, else 0; each citation of a supported statement is precise unless it
is redundant (it alone does not support the statement and the remaining citations still do).
Sample recall = mean over statements; precision = precise citations / all citations. ALCE splits
sentences with NLTK and judges support with a TRUE NLI model; sentences here are split on end
punctuation (ours) and the judge is a `SupportChecker`:

- `WorldChecker`: the synthetic world's ground truth: the statement asserts the item's gold fact
  values it mentions, and it is supported when every one of them is stated in the documents (a
  statement that asserts no known fact is unsupported, as an NLI model would judge filler);
- `CriticChecker`: the trained Self-RAG critic's IsSup aspect (`[Fully supported]` = support);
- `NLIChecker`: a sequence-classification NLI model from a local folder (entailment probability).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import fmean
from typing import Any, Protocol

from raypipe.errors import ConfigError
from raypipe.eval.metrics import answer_match
from raypipe.methods.self_reasoning.format import Doc, Trajectory, citations_in
from raypipe.methods.self_reasoning.items import TrajectoryItem
from raypipe.settings.teachers import QualityConfig

logger = logging.getLogger(__name__)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_MARKS = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")


@dataclass(frozen=True)
class SupportQuery:
    """Does `docs` support `statement`? `item` carries the question's ground truth (world checker)."""

    statement: str
    docs: tuple[Doc, ...]
    item: TrajectoryItem


class SupportChecker(Protocol):
    def supports(self, queries: Sequence[SupportQuery]) -> list[bool]: ...


def _mentions(text: str, value: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text, re.IGNORECASE) is not None


class WorldChecker:
    """Support from the world's ground truth (see the module docstring)."""

    def supports(self, queries: Sequence[SupportQuery]) -> list[bool]:
        out = []
        for q in queries:
            asserted = [f for f in q.item.gold_facts if _mentions(q.statement, f)]
            evidence = " ".join(f"{d.title} {d.text}" for d in q.docs)
            out.append(bool(asserted) and bool(q.docs) and all(_mentions(evidence, f) for f in asserted))
        return out


class CriticChecker:
    """The Self-RAG critic's IsSup judgement of the statement given the documents (joined as one
    evidence passage); support = the most probable token is in `supported`."""

    def __init__(self, predictor: Any, supported: Sequence[str]):
        self.predictor, self.supported = predictor, set(supported)

    @classmethod
    def load(cls, path: str, supported: Sequence[str]) -> CriticChecker:
        from raypipe.critic.predict import make_predictor

        return cls(make_predictor(path), supported)

    def supports(self, queries: Sequence[SupportQuery]) -> list[bool]:
        """No documents (every citation out of range) is no support, as for the other checkers; the
        critic judges the rest in one batch."""
        from raypipe.prompts import Aspect, CriticExample

        asked = [q for q in queries if q.docs]
        if not asked:
            return [False] * len(queries)
        examples = [CriticExample(Aspect.IS_SUP, q.item.question, output=q.statement,
                                  evidence="\n".join(f"{d.title}\n{d.text}" for d in q.docs)) for q in asked]
        verdicts = iter(max(dist, key=dist.get) in self.supported for dist in self.predictor.predict(examples))
        return [bool(q.docs) and next(verdicts) for q in queries]


class NLIChecker:
    """An NLI cross-encoder (premise = the documents, hypothesis = the statement) from a local folder;
    support = p(entailment) ≥ `threshold`. The entailment class is found in the model's `id2label`."""

    def __init__(self, path: str, threshold: float = 0.5, batch_size: int = 16):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModelForSequenceClassification.from_pretrained(path, local_files_only=True).eval()
        labels = {i: str(name).lower() for i, name in self.model.config.id2label.items()}
        hits = [i for i, name in labels.items() if name.startswith("entail")]
        if len(hits) != 1:
            raise ConfigError(f"trajectories.qc.nli_model {path}: no single entailment label in id2label {labels}")
        self.entail, self.threshold, self.batch_size = hits[0], threshold, batch_size

    def supports(self, queries: Sequence[SupportQuery]) -> list[bool]:
        import torch

        out: list[bool] = []
        for start in range(0, len(queries), self.batch_size):
            chunk = queries[start:start + self.batch_size]
            premises = [" ".join(f"{d.title}. {d.text}" for d in q.docs) for q in chunk]
            enc = self.tokenizer(premises, [q.statement for q in chunk], truncation=True, padding=True,
                                 return_tensors="pt")
            with torch.no_grad():
                probs = self.model(**enc).logits.softmax(-1)[:, self.entail]
            out.extend(bool(p >= self.threshold) for p in probs.tolist())
        return out


def make_checker(cfg: QualityConfig) -> SupportChecker:
    if cfg.checker == "world":
        return WorldChecker()
    if cfg.checker == "critic":
        return CriticChecker.load(cfg.critic, cfg.critic_supported)
    if not cfg.nli_model:
        raise ConfigError("trajectories.qc.checker is 'nli' but trajectories.qc.nli_model is not set")
    return NLIChecker(cfg.nli_model, cfg.nli_threshold)


# --- ALCE citation recall and precision ---------------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    text: str
    docs: tuple[int, ...]


def statements(answer: str) -> list[Statement]:
    """The answer's sentences, each with the document numbers it cites (marks removed from the text)."""
    out = []
    for sentence in _SENTENCE_END.split(answer.strip()):
        if not sentence.strip():
            continue
        numbers = tuple(dict.fromkeys(n for mark in citations_in(sentence) for n in mark))
        out.append(Statement(_MARKS.sub("", sentence).strip(), numbers))
    return out


@dataclass(frozen=True)
class CitationScores:
    recall: float
    precision: float
    n_statements: int
    n_citations: int


def citation_scores(answer: str, item: TrajectoryItem, checker: SupportChecker) -> CitationScores:
    """ALCE citation recall and precision of `answer` against `item.docs` (numbers 1..k); numbers
    outside the shown documents count as unsupported citations."""
    sents = statements(answer)
    if not sents:
        return CitationScores(0.0, 0.0, 0, 0)

    def docs_of(numbers: Sequence[int]) -> tuple[Doc, ...]:
        return tuple(item.docs[n - 1] for n in numbers if 1 <= n <= len(item.docs))

    joint = checker.supports([SupportQuery(s.text, docs_of(s.docs), item) for s in sents if s.docs])
    supported = iter(joint)
    recall = [next(supported) if s.docs else False for s in sents]
    # redundancy checks, only for supported statements with more than one citation (as ALCE)
    queries: list[SupportQuery] = []
    for s, ok in zip(sents, recall, strict=True):
        if ok and len(s.docs) > 1:
            for n in s.docs:
                queries += [SupportQuery(s.text, docs_of([n]), item),
                            SupportQuery(s.text, docs_of([m for m in s.docs if m != n]), item)]
    answers = iter(checker.supports(queries) if queries else [])
    precise = 0
    for s, ok in zip(sents, recall, strict=True):
        if not ok:
            continue
        if len(s.docs) == 1:
            precise += 1
            continue
        for _ in s.docs:
            alone, rest = next(answers), next(answers)
            precise += int(alone or not rest)
    n_citations = sum(len(s.docs) for s in sents)
    return CitationScores(fmean(recall), precise / n_citations if n_citations else 0.0, len(sents), n_citations)


# --- Algorithm 1 --------------------------------------------------------------------------------------


def em_recall(text: str, facts: Sequence[str]) -> float:
    """ASQA's EM recall: the share of gold short answers contained in the text (normalized)."""
    return fmean(answer_match(text, [f]) for f in facts) if facts else 0.0


def answer_correct(item: TrajectoryItem, t: Trajectory, cfg: QualityConfig) -> bool:
    """Program P of Algorithm 1: QA answer match (accuracy as the paper's short-form metric), the
    exact label for fact verification, EM recall of the gold facts ≥ `min_em_recall` for long form."""
    if item.task == "qa":
        return answer_match(t.answer, [item.gold])
    if item.task == "fact":
        return t.answer == item.gold
    return em_recall(t.analysis, item.gold_facts) >= cfg.min_em_recall


@dataclass
class Verdict:
    """Quality control's verdict on one parsed trajectory; `stage` is the funnel step it failed at
    (None: kept)."""

    answer_correct: bool
    citation_recall: float | None = None
    citation_precision: float | None = None
    stage: str | None = None

    @property
    def kept(self) -> bool:
        return self.stage is None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kept": self.kept}


def quality_control(item: TrajectoryItem, t: Trajectory, checker: SupportChecker, cfg: QualityConfig) -> Verdict:
    """Algorithm 1 for one sample: answer first; long form then citation recall and precision of the
    analysis (the long-form answer). Ours: a trajectory whose RAP judged every document irrelevant
    answers from internal knowledge and has nothing to cite, so the citation check applies only when
    RAP found relevant documents. With `cfg.enabled` off every sample is kept (scores still
    reported)."""
    correct = answer_correct(item, t, cfg)
    verdict = Verdict(correct)
    cited = item.task == "longform" and t.relevant
    if cited:
        scores = citation_scores(t.analysis, item, checker)
        verdict.citation_recall, verdict.citation_precision = scores.recall, scores.precision
    if not cfg.enabled:
        return verdict
    if not correct:
        verdict.stage = "answer"
    elif cited and (verdict.citation_recall < cfg.min_citation_recall
                                      or verdict.citation_precision < cfg.min_citation_precision):
        verdict.stage = "citation"
    return verdict
