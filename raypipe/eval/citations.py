"""Citation quality: ALCE's citation recall and precision (Gao et al. 2023b) with a pluggable support
checker. Self-Reasoning uses them twice: quality control of generated trajectories keeps a long-form
sample only when both pass its thresholds (Algorithm 1, `raypipe.trajectories.quality`), and the
long-form eval scores every method's answers with them (`raypipe.eval.longform`).

ALCE, per statement (sentence) of the answer: recall is 1 if the statement has citations and their
documents together support it, else 0; each citation of a supported statement is precise unless it
is redundant (it alone does not support the statement and the remaining citations still do).
Sample recall = mean over statements; precision = precise citations / all citations. ALCE splits
sentences with NLTK and judges support with a TRUE NLI model; sentences here are split on end
punctuation (ours) and the judge is a `SupportChecker`:

- `WorldChecker`: the synthetic world's ground truth: the statement asserts the sample's gold fact
  values it mentions, and it is supported when every one of them is stated in the documents (a
  statement that asserts no known fact is unsupported, as an NLI model would judge filler);
- `CriticChecker`: the trained Self-RAG critic's IsSup aspect (`[Fully supported]` = support);
- `NLIChecker`: a sequence-classification NLI model from a local folder (entailment probability).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any, Protocol

from raypipe.errors import ConfigError
from raypipe.settings.teachers import QualityConfig
from raypipe.trajectory_format import ShownDocument, citations_in

logger = logging.getLogger(__name__)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_MARKS = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")


class CitedSample(Protocol):
    """What citation scoring reads of a sample (a trajectory item of `raypipe.trajectories` is one,
    and so is an eval answer, `raypipe.eval.longform`): the question, the documents shown to it
    (cited by number, from 1) and the fact values a correct answer states (`gold_facts`)."""

    @property
    def question(self) -> str: ...

    @property
    def docs(self) -> Sequence[ShownDocument]: ...

    @property
    def gold_facts(self) -> Sequence[str]: ...


def gold_facts(meta: dict[str, Any]) -> list[str]:
    """The fact values of every grounded output sentence of a world instance's `meta`, in order, each
    once."""
    seen: dict[str, None] = {}
    for sentence in meta.get("sentences") or []:
        seen.update(dict.fromkeys(str(f) for f in sentence.get("facts") or []))
    return list(seen)


@dataclass(frozen=True)
class SupportQuery:
    """Does `docs` support `statement`? `item` carries the question's ground truth (world checker)."""

    statement: str
    docs: tuple[ShownDocument, ...]
    item: CitedSample


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
        """No documents is no support, as for the other checkers; the critic judges the rest in one
        batch."""
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


def citation_scores(answer: str, item: CitedSample, checker: SupportChecker) -> CitationScores:
    """ALCE citation recall and precision of `answer` against `item.docs` (numbers 1..k). ALCE's rule
    for a number outside the shown documents (`compute_autoais`): its statement is unsupported without
    being judged, and none of its citations counts in precision's denominator."""
    sents = statements(answer)
    if not sents:
        return CitationScores(0.0, 0.0, 0, 0)

    def docs_of(numbers: Sequence[int]) -> tuple[ShownDocument, ...]:
        return tuple(item.docs[n - 1] for n in numbers)

    judged = [bool(s.docs) and all(1 <= n <= len(item.docs) for n in s.docs) for s in sents]
    joint = checker.supports([SupportQuery(s.text, docs_of(s.docs), item) for s, j in zip(sents, judged, strict=True)
                              if j])
    supported = iter(joint)
    recall = [next(supported) if j else False for j in judged]
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
    n_citations = sum(len(s.docs) for s, j in zip(sents, judged, strict=True) if j)
    return CitationScores(fmean(recall), precise / n_citations if n_citations else 0.0, len(sents), n_citations)
