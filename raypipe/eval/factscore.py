"""FactScore of a generated biography, from the synthetic world's ground truth (CRAG §5.1, Bio).

The paper scores Biography with FactScore (Min et al. 2023): the generation is broken into atomic
facts by ChatGPT and each is checked against the subject's Wikipedia page by retrieval + an LM; the
score is the share of supported facts. Ours replaces both models with the world, which knows every
fact of every subject:

- **Units.** The generation is split into sentences with the project's segmenter
  (`raypipe.data.segment`, `segmentation.*`); a sentence stands in for FactScore's atomic facts.
- **A sentence's facts** are the fact values it states, found with the world's vocabulary: every
  value type a person's facts take (`world_facts.person_facts` and `work_facts`; `Fact.pool`):
  years (a standalone 3-4 digit number, not part of a longer number such as "12,000"), city names,
  demonyms ("Velorian"), occupations, organisation names ("<surname> <kind>", e.g. "Harlow
  Institute"), work titles ("The <adjective> <noun>[ <tail>]") and work kinds ("novel"). The
  longest match wins where two overlap ("opera composer" is one occupation, not the work kind
  "opera"). Names of people and countries are not fact values of a person and are not looked for;
  the world's name spaces keep people's names out of every other type, so the subject's own name
  never reads as a fact.
- **Supported**: every value the sentence states is one of the subject's true fact values (compared
  case-insensitively). One wrong value makes the sentence unsupported. The check is by value, not by
  relation (ours): a true value in the wrong role ("born in" the year of the subject's best-known
  work) counts as supported.
- **A sentence with no detectable fact** (ours) makes no checkable claim and is left out, as a
  sentence yielding no atomic fact adds nothing to FactScore's count. A generation with no
  fact-bearing sentence at all scores 0 (ours: FactScore leaves abstentions out and reports how many
  answered; counting them as 0 keeps a method from scoring well by stating nothing).
- **FactScore of a generation** = supported / fact-bearing sentences; of a set, the mean over its
  generations (FactScore's mean over topics).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from raypipe.data import world_vocab as vocab

_YEAR = r"(?<![\d,.])\d{3,4}(?![\d,]|\.\d)"
_CAPITALIZED = re.compile(r"(?<![\w-])[A-Z][a-z]+(?![\w-])")


@functools.cache
def _patterns() -> tuple[re.Pattern[str], frozenset[str], frozenset[str]]:
    """(one pattern for the multi-word and lower-case types and years, the single capitalized words
    that are values: cities and demonyms, the surnames organisation names are made of)."""
    org = rf"[A-Z][a-z]+ (?:{'|'.join(vocab.ORG_KINDS)})"
    tails = "|".join(re.escape(t) for t in vocab.TITLE_TAILS if t)
    title = rf"[Tt]he (?:{'|'.join(vocab.TITLE_ADJECTIVES)}) (?:{'|'.join(vocab.TITLE_NOUNS)})(?:{tails})?"
    words = sorted({*vocab.OCCUPATIONS, *vocab.WORK_VERBS}, key=len, reverse=True)
    common = "|".join(re.escape(w) for w in words)
    pattern = re.compile(rf"(?<![\w-])(?:(?P<org>{org})|(?P<title>{title})|(?i:{common})|{_YEAR})(?![\w-])")
    single = frozenset(vocab.city_names()) | frozenset(s + "ian" for s in vocab.country_stems())
    return pattern, single, frozenset(vocab.surnames())


def sentence_facts(sentence: str) -> list[str]:
    """The world fact values `sentence` states, in order (see the module docstring)."""
    pattern, single, surnames = _patterns()
    spans: list[tuple[int, int]] = []
    for m in pattern.finditer(sentence):
        if m.group("org") and m.group("org").split(" ", 1)[0] not in surnames:
            continue
        spans.append(m.span())
    spans += [m.span() for m in _CAPITALIZED.finditer(sentence) if m.group() in single]
    kept: list[tuple[int, int]] = []
    for start, end in sorted(spans, key=lambda s: (s[0], s[0] - s[1])):  # leftmost, then longest
        if not kept or start >= kept[-1][1]:
            kept.append((start, end))
    return [sentence[a:b] for a, b in kept]


@dataclass(frozen=True)
class SentenceVerdict:
    text: str
    facts: tuple[str, ...]
    #: None: the sentence states no detectable fact (not counted)
    supported: bool | None


@dataclass(frozen=True)
class FactScore:
    score: float
    verdicts: tuple[SentenceVerdict, ...]

    @property
    def n_fact_sentences(self) -> int:
        return sum(v.supported is not None for v in self.verdicts)


def score_sentences(sentences: Iterable[str], true_facts: Iterable[str]) -> FactScore:
    """FactScore of a generation already split into sentences, against the subject's fact values."""
    truth = {f.casefold() for f in true_facts}
    verdicts = []
    for sentence in sentences:
        facts = tuple(sentence_facts(sentence))
        supported = all(f.casefold() in truth for f in facts) if facts else None
        verdicts.append(SentenceVerdict(sentence.strip(), facts, supported))
    counted = [v.supported for v in verdicts if v.supported is not None]
    return FactScore(sum(counted) / len(counted) if counted else 0.0, tuple(verdicts))


def factscore(text: str, true_facts: Iterable[str], split: Callable[[str], list[str]]) -> FactScore:
    """FactScore of `text`, split into sentences by `split` (the project's `Segmenter.split`)."""
    return score_sentences((s for s in split(text) if s.strip()), true_facts)
