"""The retrieval evaluator's training data, from the synthetic world's ground truth (CRAG §4.2,
App. B.3).

The paper labels PopQA's training questions with the golden subject title: a passage titled with the
question's subject is a (not 100% relevant but high-quality) positive, and negatives are sampled at
random from the retrieval results, "rather similar to the input query but not relevant". The world
knows more than a title: `Fact.passages` names exactly the passages that state the answer. So here:

- questions are drawn from the training side only (entities that are not held out, and facts that do
  not name a held-out person), as the paper keeps its 1,399 test questions out of fine-tuning; a
  share of them are claims (a fact stated with its true or a wrong value), so the evaluator also
  serves fact verification, as the paper's transferred to PubHealth;
- positives (+1) are the passages that state the fact (wiki and web), i.e. about the subject AND
  holding the answer. Unlike the title signal, a passage about the subject that does not hold the
  answer is a negative: that is our choice, because the world's web-only people have a wiki stub
  about them that cannot answer career questions, and CRAG must call it Incorrect to search the web;
- negatives (-1) are up to `negatives` passages drawn at random from the dense retriever's top
  `retrieve_k` that do not state the fact (the same subject's other passage, look-alike names,
  passages naming the same places), plus, for a person with a near-namesake, the look-alike's passage
  whether retrieved or not (the world's hardest negative);
- with `strip_pairs` (ours), every paragraph of a positive that has several (a web page) is a pair of
  its own under the page's title, as knowledge refinement scores it: +1 (`strip_positive`) where it
  states the fact's value, -1 (`strip_negative`) where it does not. The paper trains on documents
  only; its evaluator then scores strips it never saw the like of, and ours, trained so, ranked a
  page's boilerplate paragraph above the one holding the answer.

Pairs are split by subject entity (`heldout_fraction` of the entities, by a stable hash), so the
held-out accuracy is measured on subjects the evaluator never saw.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from raypipe.data.io import write_parquet
from raypipe.data.world_entities import World
from raypipe.data.world_facts import Fact
from raypipe.data.world_passages import passage, web_passage
from raypipe.data.world_tasks import _claim, training_subject
from raypipe.disk import write_text
from raypipe.methods.crag.strips import paragraphs
from raypipe.retrieval.types import Searcher
from raypipe.settings.crag_tools import EvaluatorTrainConfig
from raypipe.settings.data import WorldConfig

#: questions per retriever call
_SEARCH_BATCH = 256

PAIR_SCHEMA = pa.schema([("query", pa.string()), ("title", pa.string()), ("text", pa.string()),
                         ("label", pa.float32()), ("kind", pa.string()), ("entity_id", pa.string()),
                         ("passage_id", pa.string())])


@dataclass(frozen=True)
class Pair:
    query: str
    title: str
    text: str
    #: +1 relevant, -1 not (the paper's regression targets)
    label: float
    #: positive | retrieved (a retrieved negative) | lookalike (a near-namesake's passage) |
    #: strip_positive | strip_negative (a paragraph of a positive with several)
    kind: str
    entity_id: str
    passage_id: str


@dataclass(frozen=True)
class Question:
    query: str
    fact: Fact
    lookalike: str | None


def passage_by_id(world: World, pid: str) -> tuple[str, str]:
    """(title, text) of a wiki (`p...`) or web (`w...`) passage id, computed from the world."""
    _, title, text = (web_passage if pid.startswith("w") else passage)(world, int(pid[1:]))
    return title, text


def draw_questions(world: World, n: int, claim_fraction: float, seed: int) -> Iterator[Question]:
    """`n` training-side questions (or claims), each with its fact and the subject's near-namesake
    passage when the subject is a person that has one."""
    rng = random.Random(seed)
    people = {world.person(i).entity_id: i for i in range(world.size.distractors)}
    made = 0
    while made < n:
        subject = training_subject(world, rng)
        if not subject.facts:
            continue
        fact = rng.choice(subject.facts)
        query = _claim(world, fact, rng)[0] if rng.random() < claim_fraction else rng.choice(fact.questions)
        j = people.get(fact.entity_id)
        lookalike = world.distractor(j).early_passage if j is not None else None
        made += 1
        yield Question(query, fact, lookalike)


def heldout_entity(entity_id: str, fraction: float) -> bool:
    """Stable across runs and machines (not Python's salted hash)."""
    digest = hashlib.sha256(entity_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def strip_pairs(q: Question, title: str, text: str, pid: str) -> Iterator[Pair]:
    """A positive's paragraphs, when it has several, each labelled by whether it states the fact: its
    value, and its subject unless the page is the subject's (an author's page states a work's kind
    in the paragraph naming the work; "film director" elsewhere on it is not the work's kind)."""
    parts = paragraphs(text)
    if len(parts) < 2:
        return
    value, subject = q.fact.value.lower(), q.fact.subject.lower()
    for part in parts:
        lower = part.lower()
        holds = value in lower and (title.lower() == subject or subject in lower)
        yield Pair(q.query, title, part, 1.0 if holds else -1.0, "strip_positive" if holds else "strip_negative",
                   q.fact.entity_id, pid)


def build_pairs(world: World, retriever: Searcher, cfg: EvaluatorTrainConfig) -> Iterator[Pair]:
    """Every question's positives, then its sampled negatives (one retriever call per batch)."""
    rng = random.Random(cfg.seed + 1)
    questions = list(draw_questions(world, cfg.questions, cfg.claim_fraction, cfg.seed))
    for start in range(0, len(questions), _SEARCH_BATCH):
        chunk = questions[start:start + _SEARCH_BATCH]
        found = retriever.search([q.query for q in chunk], cfg.retrieve_k)
        for q, hits in zip(chunk, found, strict=True):
            gold = set(q.fact.passages)
            for pid in q.fact.passages:
                title, text = passage_by_id(world, pid)
                yield Pair(q.query, title, text, 1.0, "positive", q.fact.entity_id, pid)
                if cfg.strip_pairs:
                    yield from strip_pairs(q, title, text, pid)
            candidates = list(dict.fromkeys(h.id for h in hits if h.id not in gold))
            chosen = rng.sample(candidates, min(cfg.negatives, len(candidates)))
            by_id = {h.id: h for h in hits}
            for pid in chosen:
                h = by_id[pid]
                yield Pair(q.query, h.title, h.text, -1.0, "retrieved", q.fact.entity_id, pid)
            if q.lookalike and q.lookalike not in chosen:
                title, text = passage_by_id(world, q.lookalike)
                yield Pair(q.query, title, text, -1.0, "lookalike", q.fact.entity_id, q.lookalike)


def write_pairs(world_cfg: WorldConfig, retriever: Searcher, cfg: EvaluatorTrainConfig) -> dict[str, Any]:
    """train.parquet and heldout.parquet in `cfg.data_dir`, and stats.json (counts per split, label
    and kind)."""
    world = World(world_cfg)
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "heldout": []}
    for pair in build_pairs(world, retriever, cfg):
        split = "heldout" if heldout_entity(pair.entity_id, cfg.heldout_fraction) else "train"
        splits[split].append(asdict(pair))
    out = Path(cfg.data_dir)
    stats: dict[str, Any] = {"questions": cfg.questions, "retrieve_k": cfg.retrieve_k}
    for split, rows in splits.items():
        write_parquet(pa.Table.from_pylist(rows, schema=PAIR_SCHEMA), out / f"{split}.parquet")
        stats[split] = {"pairs": len(rows), "positive": sum(r["label"] > 0 for r in rows),
                        "negative": sum(r["label"] < 0 for r in rows),
                        "kind": dict(Counter(r["kind"] for r in rows)),
                        "entities": len({r["entity_id"] for r in rows})}
    write_text(out / "stats.json", json.dumps(stats, indent=2) + "\n")
    return stats
