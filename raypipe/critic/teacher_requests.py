"""Which judgements go to the teacher: a seeded sample per aspect (Self-RAG §3.2.1, "for each group
of reflection tokens, we randomly sample instances from the original training data").

Instance-level aspects (Retrieve from the input, IsUse) take one judgement per sampled instance; IsRel
takes one evidence passage per instance (it judges the passage against the task, Table 1: x, d).
Sentence-level aspects (Retrieve given evidence, IsSup) take one sentence of each sampled instance,
the sentences before it as context, and one evidence passage. An evidence aspect asked for more
judgements than there are instances draws again from each (ours: the paper samples up to 20k of 150k
instances per aspect; a small corpus needs the second draw instead).

The fields are filled exactly as the augmentation stages fill them (`raypipe.augment.stages`), so the
critic is trained on what it will see. The evidence is a mix, so the labels are not all one class:
with probability `gt_evidence_fraction` a ground-truth passage of the instance (a supporting or
relevant one), otherwise a hard or easy negative — another passage with the same title (the same
entity, other facts), one with a similar name ("John Harlow" for "John Harlowe", the world's
distractors), or a random passage; `evidence_weights` sets the odds of these kinds.

Sentences come from the same `Segmenter` the augmentation uses, so the critic is trained on the
segments it will later judge; when the instance meta lists its sentences (the synthetic world), the
two must agree, or the instance is rejected for sentence-level aspects with a reason.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from raypipe.critic.oracle import stated_values
from raypipe.critic.teachers import LabelRequest
from raypipe.data.segment import Segmenter
from raypipe.prompts import Aspect, CriticExample
from raypipe.settings.teachers import NEGATIVE_KINDS, LabelConfig
from raypipe.tokens import passage_text

logger = logging.getLogger(__name__)

EVIDENCE_ASPECTS = (Aspect.RETRIEVE, Aspect.IS_REL, Aspect.IS_SUP)
#: characters of a title's last word that make two names "similar" (Harlow / Harlowe)
NAME_KEY_CHARS = 5
#: draws before a random passage that is not a positive is given up on
RANDOM_TRIES = 20


def name_key(title: str) -> str:
    words = title.lower().split()
    return words[-1][:NAME_KEY_CHARS] if words else ""


class PassageIndex:
    """Passages by id, by exact title and by `name_key`, for evidence lookup and negative sampling."""

    def __init__(self, passages: pa.Table):
        self.ids: list[str] = passages.column("id").to_pylist()
        self.titles: list[str] = passages.column("title").to_pylist()
        self._texts = passages.column("text")
        self.row_of = {pid: i for i, pid in enumerate(self.ids)}
        self.by_title: dict[str, list[int]] = defaultdict(list)
        self.by_name: dict[str, list[int]] = defaultdict(list)
        for i, title in enumerate(self.titles):
            self.by_title[title].append(i)
            self.by_name[name_key(title)].append(i)

    def __len__(self) -> int:
        return len(self.ids)

    def evidence(self, passage_id: str) -> str:
        """The passage as the critic reads it (`tokens.passage_text`: the body of `<paragraph>`)."""
        i = self.row_of[passage_id]
        return passage_text(self.titles[i], self._texts[i].as_py())


@dataclass
class SampleResult:
    requests: dict[Aspect, list[LabelRequest]] = field(default_factory=dict)
    #: records for the rejects file: instance id, aspect, reason, detail
    rejects: list[dict[str, Any]] = field(default_factory=list)
    #: per aspect: how many evidence passages of each kind (ground_truth, same_title, ...)
    evidence_kinds: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    requested: dict[str, int] = field(default_factory=dict)
    #: per aspect: ground-truth passage ids not found in the configured passages (e.g. web-only ones)
    outside_corpus: Counter[str] = field(default_factory=Counter)
    #: IsUse requests with another question's output (`RequestSampler.swapped_outputs`)
    swapped_outputs: int = 0


class _EvidencePicker:
    def __init__(self, index: PassageIndex, gt_fraction: float, weights: Mapping[str, float]):
        self.index, self.gt_fraction = index, gt_fraction
        self.weights = {kind: weights.get(kind, 1.0) for kind in NEGATIVE_KINDS}

    def _random(self, rng: np.random.Generator, exclude: set[str]) -> str | None:
        for _ in range(RANDOM_TRIES):
            pid = self.index.ids[int(rng.integers(len(self.index)))]
            if pid not in exclude:
                return pid
        return None

    def pick(self, rng: np.random.Generator, positives: list[str], exclude: set[str],
             reference_titles: list[str], retrieved: Sequence[int] = ()) -> tuple[str, str] | None:
        """(passage id, kind), or None when the corpus has nothing but positives. `retrieved`: the
        instance's nearest passages (rows of the index), a pool of their own when given."""
        if positives and rng.random() < self.gt_fraction:
            return positives[int(rng.integers(len(positives)))], "ground_truth"
        same = {i for t in reference_titles for i in self.index.by_title.get(t, ())}
        similar = {i for t in reference_titles for i in self.index.by_name.get(name_key(t), ())} - same
        pools = [(kind, sorted(i for i in rows if self.index.ids[i] not in exclude))
                 for kind, rows in (("same_title", same), ("similar_title", similar), ("retrieved", set(retrieved)))]
        pools = [(kind, rows) for kind, rows in pools if rows] + [("random", [])]
        odds = np.array([self.weights[kind] for kind, _ in pools])
        if odds.sum() == 0:  # only kinds weighted 0 are at hand: a random passage, as without weights
            odds[-1] = 1.0
        kind, rows = pools[int(rng.choice(len(pools), p=odds / odds.sum()))]
        if rows:
            return self.index.ids[rows[int(rng.integers(len(rows)))]], kind
        pid = self._random(rng, exclude)
        return None if pid is None else (pid, kind)


class RequestSampler:
    """Builds the per-aspect samples of LabelRequests from instances (INSTANCE_SCHEMA rows)."""

    def __init__(self, instances: pa.Table, passages: PassageIndex, cfg: LabelConfig, segmenter: Segmenter,
                 neighbours: dict[int, list[int]] | None = None):
        self.rows = instances.to_pylist()
        #: instance row -> its nearest passages (rows of `passages`), the `retrieved` evidence kind
        self.neighbours = neighbours or {}
        self.passages, self.cfg, self.segmenter = passages, cfg, segmenter
        self.picker = _EvidencePicker(passages, cfg.gt_evidence_fraction, cfg.evidence_weights)
        self._sentences: dict[int, list[str] | None] = {}
        self.result = SampleResult()

    def size(self, aspect: Aspect) -> int:
        return self.cfg.aspect_sizes.get(aspect.value, self.cfg.per_aspect)

    def _meta(self, row: dict[str, Any]) -> dict[str, Any]:
        return json.loads(row["meta"]) if row["meta"] else {}

    def _reject(self, row: dict[str, Any], aspect: Aspect, reason: str, detail: str) -> None:
        self.result.rejects.append({"id": row["id"], "aspect": aspect.value, "reason": reason, "detail": detail})

    def sentences(self, i: int, aspect: Aspect) -> list[str] | None:
        """The output's sentences as the segmenter cuts them (trailing whitespace kept, so joining
        gives the output back), or None when they disagree with the ground truth's sentence list."""
        if i not in self._sentences:
            row = self.rows[i]
            split = self.segmenter.split(row["output"])
            truth = self._meta(row).get("sentences")
            if truth is not None and [x.strip() for x in split] != [str(t.get("text", "")).strip() for t in truth]:
                self._reject(row, aspect, "sentence_mismatch",
                             f"segmenter found {len(split)} sentences, meta lists {len(truth)}")
                split = None
            self._sentences[i] = split
        return self._sentences[i]

    def _instance_request(self, aspect: Aspect, i: int) -> LabelRequest:
        row = self.rows[i]
        output = row["output"] if aspect is Aspect.IS_USE else ""
        example = CriticExample(aspect, row["instruction"], input=row["input"], output=output)
        return LabelRequest(aspect, example, row["id"], self._meta(row))

    def _positives(self, aspect: Aspect, meta: dict[str, Any], sentence_idx: int | None
                   ) -> tuple[list[str], set[str]]:
        """Ground-truth passages to draw from, and the passages a negative must avoid."""
        if aspect is Aspect.IS_REL:
            relevant = list(meta.get("relevant_passages", []))
            return relevant, set(relevant)
        truth = meta.get("sentences") or []
        support: dict[str, str] = truth[sentence_idx].get("support", {}) if truth and sentence_idx is not None else {}
        if aspect is Aspect.RETRIEVE:
            full = sorted(p for p, level in support.items() if level == "full")
            return full, set(full)
        return sorted(support), set(support)

    def _evidence_request(self, aspect: Aspect, i: int, rng: np.random.Generator, taken: set[str],
                          first_pass: bool) -> LabelRequest | None:
        """One evidence judgement of instance `i`, or None: no sentence, no negative passage, or a
        judgement already in `taken` (a later pass drew the same sentence and passage again)."""
        row = self.rows[i]
        sentences: list[str] = []
        s = None
        if aspect is not Aspect.IS_REL:
            sentences = self.sentences(i, aspect) or []
            if not sentences:
                return None
            s = int(rng.integers(len(sentences)))
        meta = self._meta(row)
        positives, exclude = self._positives(aspect, meta, s)
        # The world's ground truth also names passages of the separate web corpus; only passages of
        # the configured corpus can be shown as evidence.
        outside = [p for p in positives if p not in self.passages.row_of]
        positives = [p for p in positives if p in self.passages.row_of]
        titles = [self.passages.titles[self.passages.row_of[p]] for p in positives]
        if meta.get("entity"):
            titles.append(meta["entity"])
        picked = self.picker.pick(rng, positives, exclude, titles, self.neighbours.get(i, ()))
        if picked is None:
            if first_pass:
                self._reject(row, aspect, "no_negative_passage", "every passage in the corpus is a positive")
            return None
        passage_id, kind = picked
        example = CriticExample(
            aspect, row["instruction"], input=row["input"], evidence=self.passages.evidence(passage_id),
            preceding="".join(sentences[:s]).strip() if s is not None else "",
            output=sentences[s].strip() if s is not None else "",
        )
        request = LabelRequest(aspect, example, row["id"], meta, sentence_idx=s, passage_id=passage_id)
        if request.id in taken:
            return None
        self.result.evidence_kinds[aspect.value][kind] += 1
        if first_pass:
            self.result.outside_corpus[aspect.value] += len(outside)
        return request

    def sample(self, aspect: Aspect, aspect_index: int) -> list[LabelRequest]:
        """Up to `size(aspect)` requests, in a seeded random order of the instances. An instance-level
        aspect takes each instance once. An evidence aspect asked for more requests than there are
        instances goes over them again, drawing another sentence and passage for each (a draw it
        already made is skipped), until it has enough or a pass adds nothing."""
        n = self.size(aspect)
        self.result.requested[aspect.value] = n
        rng = np.random.default_rng([self.cfg.seed, aspect_index])
        requests: list[LabelRequest] = []
        taken: set[str] = set()
        first_pass = True
        while len(requests) < n:
            before = len(requests)
            for i in rng.permutation(len(self.rows)):
                if len(requests) >= n:
                    break
                if aspect in EVIDENCE_ASPECTS:
                    request = self._evidence_request(aspect, int(i), rng, taken, first_pass)
                else:
                    request = self._instance_request(aspect, int(i))
                if request is not None:
                    requests.append(request)
                    taken.add(request.id)
            first_pass = False
            if len(requests) == before or aspect not in EVIDENCE_ASPECTS:
                break
        if len(requests) < n:
            logger.warning("%s: asked for %d examples, the instances yield %d", aspect.value, n, len(requests))
        return requests

    def swapped_outputs(self, n: int, eligible: Callable[[str], bool] = lambda _: True) -> list[LabelRequest]:
        """Up to `n` IsUse requests, a seeded sample of all pairs of two questions (instances whose meta
        holds an `answer`) about the same subject (meta `entity_id`), both `eligible`, where the second
        one's output states a value other than the first one's answer: the first one's instruction
        with the second one's output. The output is true and on topic but no answer, the judgement a
        critic sees too rarely in the sample above to learn (ours). The request's meta is the first
        instance's with the second one's sentences and no utility: the pair's ground truth."""
        metas = [self._meta(row) for row in self.rows]
        by_subject: dict[str, list[int]] = defaultdict(list)
        for i, (row, meta) in enumerate(zip(self.rows, metas, strict=True)):
            if meta.get("answer") is not None and meta.get("entity_id") and eligible(row["id"]):
                by_subject[meta["entity_id"]].append(i)
        pairs = [(q, d) for rows in by_subject.values() for q in rows for d in rows
                 if d != q and str(metas[q]["answer"]) not in stated_values(metas[d])]
        rng = np.random.default_rng([self.cfg.seed, len(Aspect)])
        requests = []
        for k in rng.permutation(len(pairs))[:n]:
            q, d = pairs[int(k)]
            question, donor = self.rows[q], self.rows[d]
            meta = {key: v for key, v in metas[q].items() if key != "utility"} | {"sentences": metas[d].get("sentences")}
            example = CriticExample(Aspect.IS_USE, question["instruction"], input=question["input"],
                                    output=donor["output"])
            requests.append(LabelRequest(Aspect.IS_USE, example, question["id"], meta, output_of=donor["id"]))
        if len(requests) < n:
            logger.warning("is_use: asked for %d swapped outputs, the instances yield %d", n, len(requests))
        return requests

    def sample_all(self) -> SampleResult:
        for index, aspect in enumerate(Aspect):
            if self.size(aspect) > 0:
                self.result.requests[aspect] = self.sample(aspect, index)
        return self.result
