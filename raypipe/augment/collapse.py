"""Collapse is never silent: D_gen's reflection labels beside the teacher's on a sample of the same rows.

A critic that answers one label everywhere (the majority label of its training set) still fills every
slot of Algorithm 3, so D_gen looks complete; the generator trained on it then writes one fixed
critique (IsRel that cannot rank passages, IsSup never written), and nothing downstream says why.
After augmentation this module counts, per aspect, the labels the critic wrote into D_gen (every
judgement recorded in the rows' states: Retrieve from the input and per segment, IsRel per retrieved
passage, IsSup per passage it judged relevant, IsUse per output), has the teacher (`label.teacher`,
the one that labelled D_critic) judge the same positions of a seeded sample of rows, and flags an
aspect whose D_gen labels are one label for more than `max_share` where the teacher's are not.

The teacher judges what the critic judged, with the same fields (`raypipe.augment.stages` fills them
the same way): IsRel on every passage D_gen retrieved, Retrieve per segment with the first evidence
(rendered as D_gen renders it: `stages.rendered_decisions`), and IsSup on the passages *the teacher*
calls relevant, as Algorithm 3 asks IsSup only after IsRel; so a critic that never says [Relevant]
leaves D_gen without IsSup labels while the teacher's sample has them, which is a collapse too. Where
the paper is silent (it reports the critic's agreement on a held-out set, App. C.1, not D_gen's label
shares), the rule and its 95% are ours, from issue 31.
"""

from __future__ import annotations

import heapq
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from raypipe import tokens as T
from raypipe.augment.stages import rendered_decisions
from raypipe.augment.state import InstanceState
from raypipe.critic.teacher_factory import make_critic_teacher
from raypipe.critic.teachers import LabelRequest, Teacher
from raypipe.data.stable_random import stable_uniforms
from raypipe.errors import DataError, RaypipeError
from raypipe.prompts import ASPECT_LABELS, Aspect, CriticExample
from raypipe.settings.augment import CollapseCheckConfig
from raypipe.settings.teachers import TeacherConfig

logger = logging.getLogger(__name__)

#: rows the oracle teacher relabels when `sample_rows` is unset (free); an OpenAI teacher gets 0
ORACLE_SAMPLE_ROWS = 200
#: a judgement's place in D_gen: (row id, segment, passage), -1 where the aspect has none
Key = tuple[str, int, int]
_ROW_COLUMNS = ["id", "instruction", "input", "state"]
#: instance ids -> their meta (the ground truth the oracle teacher reads)
MetaLoader = Callable[[set[str]], dict[str, dict[str, Any]]]
#: what the warning tells a user to do about a collapsed aspect
FIX = ("check the critic's agreement per aspect (`raypipe train critic` prints it; agreement.json), and "
       "retrain it: training.critic.kind=encoder, more or balanced labels (label.per_aspect, "
       "label.aspect_sizes), training.critic.encoder_class_weights=inverse_frequency (or tempered on "
       "one aspect: '{is_use: 0.5}')")


@dataclass
class DGenRow:
    """A written D_gen row as the check reads it; `meta` is its instance's ground truth (the oracle
    teacher's input, `{}` when the instance has none)."""

    id: str
    instruction: str
    input: str
    state: InstanceState
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def output(self) -> str:
        """The output without reflection tokens: its segments are a lossless split of it."""
        return "".join(seg.text for seg in self.state.segments)


def critic_judgements(row: DGenRow) -> dict[Aspect, dict[Key, str]]:
    """The labels the critic wrote into one row, per aspect and position."""
    s, base = row.state, (row.id, -1, -1)
    out: dict[Aspect, dict[Key, str]] = {aspect: {} for aspect in Aspect}
    if s.retrieve is not None:
        out[Aspect.RETRIEVE_INPUT][base] = T.RETRIEVAL if s.retrieve else T.NO_RETRIEVAL
    if s.utility:
        out[Aspect.IS_USE][base] = s.utility
    for t, seg in enumerate(s.segments):
        if s.retrieve and seg.decision:
            out[Aspect.RETRIEVE][(row.id, t, -1)] = seg.decision
        for j, label in enumerate(seg.is_rel):
            if label:
                out[Aspect.IS_REL][(row.id, t, j)] = label
        for j, sup in enumerate(seg.is_sup):
            if sup:
                out[Aspect.IS_SUP][(row.id, t, j)] = sup
    return out


def _sentences_agree(row: DGenRow) -> bool:
    """Segment t is the ground truth's sentence t (what the oracle's sentence index reads), unless
    the instance lists other sentences than the segmenter cut."""
    truth = row.meta.get("sentences")
    return truth is None or ([seg.text.strip() for seg in row.state.segments]
                             == [str(x.get("text", "")).strip() for x in truth])


def _preceding(row: DGenRow, t: int) -> str:
    return "".join(seg.text for seg in row.state.segments[:t]).strip()


class _Asker:
    """Collects the teacher's requests of one aspect with their positions, then labels them in one
    call (an OpenAI teacher sends them concurrently)."""

    def __init__(self, teacher: Teacher):
        self.teacher = teacher
        self.asks: dict[Aspect, list[tuple[Key, LabelRequest]]] = defaultdict(list)

    def add(self, key: Key, row: DGenRow, example: CriticExample, sentence: int | None = None,
            passage: str | None = None) -> None:
        self.asks[example.aspect].append((key, LabelRequest(example.aspect, example, row.id, row.meta,
                                                            sentence_idx=sentence, passage_id=passage)))

    def label(self, aspect: Aspect) -> dict[Key, str]:
        asks = self.asks.pop(aspect, [])
        labels = self.teacher.label(aspect, [r for _, r in asks]) if asks else []
        return {key: label for (key, _), label in zip(asks, labels, strict=True) if label is not None}


def teacher_judgements(rows: list[DGenRow], teacher: Teacher) -> tuple[dict[Aspect, dict[Key, str]], Counter[str]]:
    """The teacher's labels at the critic's positions of `rows` (see the module docstring), and the
    rows whose sentence-level judgements were left out, by reason."""
    asker = _Asker(teacher)
    skipped: Counter[str] = Counter()
    for row in rows:
        base = (row.id, -1, -1)
        if row.state.retrieve is not None:
            asker.add(base, row, CriticExample(Aspect.RETRIEVE_INPUT, row.instruction, input=row.input))
        if row.state.utility:
            asker.add(base, row, CriticExample(Aspect.IS_USE, row.instruction, input=row.input, output=row.output))
        for t, seg in enumerate(row.state.segments):
            for j, p in enumerate(seg.passages):
                asker.add((row.id, t, j), row, CriticExample(Aspect.IS_REL, row.instruction, input=row.input,
                                                             evidence=p.text_for_model()), passage=p.id)
        first = row.state.first_evidence
        if not row.state.retrieve:
            continue
        if not _sentences_agree(row):
            skipped["sentences_differ_from_ground_truth"] += 1
        elif first is None:
            skipped["no_first_evidence"] += 1
        else:
            for t, seg in enumerate(row.state.segments):
                asker.add((row.id, t, -1), row, CriticExample(
                    Aspect.RETRIEVE, row.instruction, input=row.input, output=seg.text.strip(),
                    evidence=first.text_for_model(), preceding=_preceding(row, t)), sentence=t, passage=first.id)
    labels = {aspect: asker.label(aspect) for aspect in (Aspect.RETRIEVE_INPUT, Aspect.IS_USE, Aspect.IS_REL,
                                                         Aspect.RETRIEVE)}
    for row in rows:
        keys = [(row.id, t, -1) for t in range(len(row.state.segments))]
        if any(k in labels[Aspect.RETRIEVE] for k in keys):
            rendered = rendered_decisions([labels[Aspect.RETRIEVE].get(k) for k in keys],
                                          row.state.first_evidence is not None)
            labels[Aspect.RETRIEVE].update({k: d for k, d in zip(keys, rendered, strict=True) if d is not None})
        if not _sentences_agree(row):
            continue
        for t, seg in enumerate(row.state.segments):
            for j, p in enumerate(seg.passages):
                if labels[Aspect.IS_REL].get((row.id, t, j)) == T.RELEVANT:
                    asker.add((row.id, t, j), row, CriticExample(
                        Aspect.IS_SUP, row.instruction, input=row.input, output=seg.text.strip(),
                        evidence=p.text_for_model(), preceding=_preceding(row, t)), sentence=t, passage=p.id)
    labels[Aspect.IS_SUP] = asker.label(Aspect.IS_SUP)
    return labels, skipped


def _shares(counts: Counter[str], aspect: Aspect) -> dict[str, float]:
    n = sum(counts.values())
    return {label: round(counts[label] / n, 4) if n else 0.0 for label in ASPECT_LABELS[aspect]}


def is_collapsed(dgen: Counter[str], teacher: Counter[str], max_share: float) -> bool:
    """One label over `max_share` of D_gen's labels (or none at all) where the teacher's top label is
    not; never without teacher labels to compare with."""
    n_teacher, n_dgen = sum(teacher.values()), sum(dgen.values())
    if not n_teacher or max(teacher.values()) / n_teacher > max_share:
        return False
    return n_dgen == 0 or max(dgen.values()) / n_dgen > max_share


def collapse_report(rows: Iterable[DGenRow], cfg: CollapseCheckConfig, sample_rows: int,
                    teacher: Teacher | None, load_meta: MetaLoader | None = None,
                    needs_meta: bool = False) -> dict[str, Any]:
    """Per aspect: D_gen's label shares over every row of `rows` (one pass), the teacher's over
    `sample_rows` of them (drawn by a seeded hash of the id, so the sample does not depend on shard
    order), their agreement where both judged, and whether the aspect collapsed. `load_meta(ids)`
    gives the sampled rows' instance ground truth (id -> meta); with `needs_meta` (the oracle
    teacher), a sampled row without one is left out and counted."""
    dgen: dict[Aspect, Counter[str]] = {aspect: Counter() for aspect in Aspect}
    heap: list[tuple[float, str, DGenRow]] = []
    n_rows = 0
    for row in rows:
        n_rows += 1
        for aspect, labels in critic_judgements(row).items():
            dgen[aspect].update(labels.values())
        if sample_rows and teacher is not None:
            (u,) = stable_uniforms(f"{cfg.seed}|collapse|{row.id}")
            entry = (-u, row.id, row)  # a max-heap of the smallest draws
            if len(heap) < sample_rows:
                heapq.heappush(heap, entry)
            elif entry > heap[0]:
                heapq.heapreplace(heap, entry)
    sample = sorted((row for _, _, row in heap), key=lambda r: r.id)
    if sample and load_meta is not None:
        metas = load_meta({r.id for r in sample})
        for row in sample:
            row.meta = metas.get(row.id, {})
    skipped: Counter[str] = Counter()
    if needs_meta:
        skipped["no_ground_truth"] = sum(not row.meta for row in sample)
        sample = [row for row in sample if row.meta]
    taught: dict[Aspect, dict[Key, str]] = {aspect: {} for aspect in Aspect}
    if sample and teacher is not None:
        taught, unasked = teacher_judgements(sample, teacher)
        skipped.update(unasked)
    critic_sample: dict[Aspect, dict[Key, str]] = {aspect: {} for aspect in Aspect}
    for row in sample:
        for aspect, labels in critic_judgements(row).items():
            critic_sample[aspect].update(labels)
    aspects = {}
    for aspect in Aspect:
        theirs = Counter(taught[aspect].values())
        both = [k for k in taught[aspect] if k in critic_sample[aspect]]
        agree = sum(taught[aspect][k] == critic_sample[aspect][k] for k in both)
        aspects[aspect.value] = {
            "dgen": _shares(dgen[aspect], aspect), "dgen_n": sum(dgen[aspect].values()),
            "teacher": _shares(theirs, aspect), "teacher_n": sum(theirs.values()),
            "agreement": round(agree / len(both), 4) if both else None,
            "collapsed": is_collapsed(dgen[aspect], theirs, cfg.max_share),
        }
    return {"collapsed": [a for a, r in aspects.items() if r["collapsed"]], "rows": n_rows,
            "sample_rows": len(sample), "max_share": cfg.max_share, "skipped": {k: v for k, v in skipped.items() if v},
            "teacher_discarded": dict(teacher.discarded) if teacher else {},
            "teacher_failed": dict(teacher.failed) if teacher else {}, "aspects": aspects}


def _top(shares: dict[str, float]) -> tuple[str, float]:
    return max(shares.items(), key=lambda kv: kv[1])


def announce(report: dict[str, Any], cfg: CollapseCheckConfig, teacher_kind: str) -> None:
    """Log the verdict: a loud warning per collapsed aspect (or, with no teacher sample, per aspect
    over `max_share`, which cannot be confirmed); with `cfg.fail`, a collapsed aspect is an error."""
    for aspect, r in report["aspects"].items():
        label, share = _top(r["dgen"])
        if r["collapsed"]:
            held = "none of D_gen's labels" if not r["dgen_n"] else f"{100 * share:.0f}% of D_gen's labels are {label}"
            teacher = ", ".join(f"{k} {100 * v:.0f}%" for k, v in r["teacher"].items() if v)
            logger.warning("CRITIC COLLAPSE in %s: %s (of %d), but the %s teacher's labels on the same rows "
                           "are mixed (%s; %d judgements): the generator will learn one fixed %s. Fix: %s",
                           aspect, held, r["dgen_n"], teacher_kind, teacher, r["teacher_n"], aspect, FIX)
        elif not report["sample_rows"] and r["dgen_n"] and share > cfg.max_share:
            logger.warning("%s: %.0f%% of D_gen's labels are %s, unchecked: no teacher sample "
                           "(augment.collapse_check.sample_rows). If the teacher's labels are mixed, %s",
                           aspect, 100 * share, label, FIX)
    if not report["sample_rows"]:
        logger.info("collapse check: no teacher sample (augment.collapse_check.sample_rows); D_gen's label "
                    "shares are in stats.json")
    elif not report["collapsed"]:
        logger.info("collapse check: no aspect collapsed (%d rows relabelled by the %s teacher)",
                    report["sample_rows"], teacher_kind)
    elif cfg.fail:
        raise RaypipeError(f"D_gen's critic labels collapsed in {', '.join(report['collapsed'])} (see the "
                           "warnings above and collapse_check in stats.json); set "
                           "augment.collapse_check.fail=false to keep going anyway")


def read_dgen(data_dir: Path) -> Iterator[DGenRow]:
    """The written rows of D_gen, up-sampled, contrast and unsupported copies left out (they repeat
    their source row's judgements)."""
    for path in sorted(data_dir.glob("*.parquet")):
        for batch in pq.ParquetFile(path).iter_batches(columns=_ROW_COLUMNS):
            for r in batch.to_pylist():
                if not any(copy in r["id"] for copy in ("#up", "#contrast", "#unsupported")):
                    yield DGenRow(r["id"], r["instruction"], r["input"], InstanceState.from_json(r["state"]))


def instance_metas(files: list[str]) -> MetaLoader:
    """A `MetaLoader` over the instance shards (a shard without a meta column gives `{}`, as the
    instance reader does)."""

    def load(ids: set[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for path in files:
            if "meta" not in pq.read_schema(path).names:
                continue
            table = pq.read_table(path, columns=["id", "meta"])
            for rid, meta in zip(table.column("id").to_pylist(), table.column("meta").to_pylist(), strict=True):
                if rid not in ids:
                    continue
                try:
                    found[rid] = json.loads(meta) if meta else {}
                except json.JSONDecodeError as exc:
                    raise DataError(f"meta is not JSON: {exc}", file=path, row_id=rid, field="meta") from exc
        return found

    return load


def sample_size(check: CollapseCheckConfig, teacher: TeacherConfig) -> int:
    """`check.sample_rows`, or its default for `teacher`."""
    if check.sample_rows is not None:
        return check.sample_rows
    return ORACLE_SAMPLE_ROWS if teacher.kind == "oracle" else 0


def run_collapse_check(check: CollapseCheckConfig, teacher_cfg: TeacherConfig, out_dir: Path,
                       instance_files: list[str]) -> dict[str, Any]:
    """The report over the finished shards of `out_dir`, `teacher_cfg` relabelling a sample; an OpenAI
    teacher keeps its label cache in `out_dir/collapse_check/` (a rerun asks nothing twice)."""
    n = sample_size(check, teacher_cfg)
    teacher = make_critic_teacher(teacher_cfg, out_dir / "collapse_check") if n else None
    try:
        report = collapse_report(read_dgen(out_dir / "data"), check, n, teacher,
                                 instance_metas(instance_files), needs_meta=teacher_cfg.kind == "oracle")
    finally:
        if teacher is not None:
            teacher.close()
    return {"teacher": teacher_cfg.kind if teacher is not None else None, **report}
