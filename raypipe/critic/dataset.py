"""The critic data set D_critic, written by `raypipe label` (raypipe.jobs.label) (Self-RAG §3.2.1, Algorithm 2 lines 3-6).

Samples judgements per aspect from the instances, has the teacher label them, and writes prompt /
target pairs: the prompt is the critic's input in the generator prompt format (`prompts.critic_prompt`)
and the target is the reflection token (Eq. 1); `example` keeps the judgement's fields (instruction,
input, preceding, evidence, output), which an encoder critic reads instead of the prompt
(`critic_prompt(example)` is the prompt). Rows are split into train and dev by instance id, so no
instance's judgements leak from one into the other; dev is what the agreement report (the paper's
Table 4 analogue) scores the trained critic on.

Layout under `label.out_dir`::

    train/part-00000.parquet ...   id, instance_id, aspect, prompt, target, example
    dev/part-00000.parquet ...
    stats.json                     label distribution, discarded/failed counts, sizes, evidence mix
    teacher_cache.jsonl            (openai teacher) every reply so far; a rerun skips these ids
    rejects/                       instances/passages that failed validation; sampling.rejects.jsonl
    _SUCCESS

A finished folder (`_SUCCESS`) is not redone; delete it to relabel.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from raypipe.critic.teacher_factory import make_critic_teacher
from raypipe.critic.teacher_requests import PassageIndex, RequestSampler, SampleResult
from raypipe.critic.teachers import LabelRequest, Teacher
from raypipe.data.io import read_records, write_jsonl, write_parquet
from raypipe.data.segment import Segmenter
from raypipe.data.stable_random import stable_uniforms
from raypipe.disk import write_text
from raypipe.errors import RaypipeError
from raypipe.prompts import Aspect, CriticExample, critic_prompt, task_input
from raypipe.settings.data import LimitsConfig, SegmentationConfig
from raypipe.settings.retrieval import RetrievalConfig
from raypipe.settings.teachers import LabelConfig

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev")
#: the CriticExample fields a row keeps beside its prompt ("" where unset)
EXAMPLE_FIELDS = ("instruction", "input", "preceding", "evidence", "output")
CRITIC_SCHEMA = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("instance_id", pa.string(), nullable=False),
    pa.field("aspect", pa.string(), nullable=False),
    pa.field("prompt", pa.string(), nullable=False),
    pa.field("target", pa.string(), nullable=False),
    pa.field("example", pa.struct([(name, pa.string()) for name in EXAMPLE_FIELDS]), nullable=False),
])


def split_of(instance_id: str, cfg: LabelConfig) -> str:
    """"dev" for a seeded, order-independent `dev_fraction` of instance ids, else "train"."""
    (u,) = stable_uniforms(f"{cfg.seed}|split|{instance_id}")
    return "dev" if u < cfg.dev_fraction else "train"


def example_column(example: CriticExample) -> dict[str, str]:
    """The `example` value of a row: every field, "" where unset."""
    return {name: getattr(example, name) or "" for name in EXAMPLE_FIELDS}


def row_example(aspect: str, fields: dict[str, str]) -> CriticExample:
    """The judgement a row's `aspect` and `example` values hold ("" stands for an unset field, which a
    CriticExample treats as unset)."""
    return CriticExample(Aspect(aspect), **fields)


def _row(request: LabelRequest, label: str) -> dict[str, Any]:
    return {"id": request.id, "instance_id": request.instance_id, "aspect": request.aspect.value,
            "prompt": critic_prompt(request.example), "target": label, "example": example_column(request.example)}


def _write_split(rows: list[dict[str, Any]], folder: Path, shard_size: int) -> int:
    """Replace the split's parts (a stale part from an earlier, larger run must not survive)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("part-*.parquet"):
        old.unlink()
    rows = sorted(rows, key=lambda r: (r["aspect"], r["id"]))
    for part, start in enumerate(range(0, max(len(rows), 1), shard_size)):
        chunk = rows[start : start + shard_size]
        write_parquet(pa.Table.from_pylist(chunk, schema=CRITIC_SCHEMA), folder / f"part-{part:05d}.parquet")
    return len(rows)


def _label_all(teacher: Teacher, sample: SampleResult, cfg: LabelConfig
               ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    rows: dict[str, list[dict[str, Any]]] = {split: [] for split in SPLITS}
    per_aspect: dict[str, Any] = {}
    for aspect, requests in sample.requests.items():
        labels = teacher.label(aspect, requests)
        counts: Counter[str] = Counter()
        sizes: Counter[str] = Counter()
        for request, label in zip(requests, labels, strict=True):
            if label is None:
                continue
            split = split_of(request.instance_id, cfg)
            rows[split].append(_row(request, label))
            counts[label] += 1
            sizes[split] += 1
        per_aspect[aspect.value] = {
            "requested": sample.requested[aspect.value], "sampled": len(requests), "labeled": sum(counts.values()),
            "discarded": teacher.discarded[aspect.value], "failed": teacher.failed[aspect.value],
            "train": sizes["train"], "dev": sizes["dev"], "labels": dict(sorted(counts.items())),
        }
        if aspect is Aspect.IS_USE and sample.swapped_outputs:
            per_aspect[aspect.value]["swapped_outputs"] = sample.swapped_outputs
        if aspect.value in sample.evidence_kinds:
            per_aspect[aspect.value]["evidence"] = dict(sorted(sample.evidence_kinds[aspect.value].items()))
            per_aspect[aspect.value]["gt_passages_outside_corpus"] = sample.outside_corpus[aspect.value]
    return rows, per_aspect


def retrieved_neighbours(retrieval: RetrievalConfig, k: int, instances: pa.Table,
                         index: PassageIndex) -> dict[int, list[int]]:
    """Each instance's top `k` passages from the index of `retrieval`, as rows of
    `index` (a hit the labelled corpus lacks is left out). The query is augmentation's first one, the
    task input then the output, so the critic is taught on the neighbours it will judge there."""
    from raypipe.retrieval.retriever import load_retriever

    rows = instances.select(["instruction", "input", "output"]).to_pylist()
    queries = [f"{task_input(r['instruction'], r['input'])}\n{r['output']}" for r in rows]
    hits = load_retriever(retrieval).search(queries, k)
    return {i: [index.row_of[p.id] for p in found if p.id in index.row_of] for i, found in enumerate(hits)}


def write_critic_data(lc: LabelConfig, retrieval: RetrievalConfig, segmentation: SegmentationConfig,
                      limits: LimitsConfig) -> dict[str, Any]:
    """Label a sample with `lc.teacher` and write D_critic to `lc.out_dir`; returns the stats. Rows over
    `limits` are rejected; `retrieval` finds the retrieved evidence when `lc.retrieved_evidence_k` asks."""
    out = Path(lc.out_dir)
    stats_path = out / "stats.json"
    if (out / "_SUCCESS").exists() and stats_path.exists():
        logger.info("%s is complete (_SUCCESS); delete it to relabel", out)
        return {**json.loads(stats_path.read_text()), "skipped": True}
    start = time.perf_counter()
    (out / "_SUCCESS").unlink(missing_ok=True)
    instances, instance_report = read_records(lc.instances, "instance", out / "rejects" / "instances",
                                              limits=limits)
    passages, passage_report = read_records(lc.passages, "passage", out / "rejects" / "passages",
                                            limits=limits)
    if instances.num_rows == 0 or passages.num_rows == 0:
        raise RaypipeError(f"nothing to label: {instances.num_rows} valid instances in {lc.instances}, "
                           f"{passages.num_rows} valid passages in {lc.passages}")
    index = PassageIndex(passages)
    neighbours = retrieved_neighbours(retrieval, lc.retrieved_evidence_k, instances, index) if lc.retrieved_evidence_k \
        else None
    sampler = RequestSampler(instances, index, lc, Segmenter(segmentation), neighbours)
    sample = sampler.sample_all()
    if lc.is_use_swapped_outputs:
        # train only: dev keeps the sample's mix, so agreement stays comparable across settings
        swapped = sampler.swapped_outputs(lc.is_use_swapped_outputs, lambda i: split_of(i, lc) == "train")
        sample.requests.setdefault(Aspect.IS_USE, []).extend(swapped)
        sample.requested.setdefault(Aspect.IS_USE.value, 0)
        sample.swapped_outputs = len(swapped)
    if sample.rejects:
        write_jsonl(sample.rejects, out / "rejects" / "sampling.rejects.jsonl")
    teacher = make_critic_teacher(lc.teacher, out)
    try:
        rows, per_aspect = _label_all(teacher, sample, lc)
    finally:
        teacher.close()
    sizes = {split: _write_split(rows[split], out / split, lc.shard_size) for split in SPLITS}
    stats = {
        "out_dir": str(out), "teacher": lc.teacher.kind, **sizes,
        "aspects": per_aspect,
        "sampling_rejects": dict(Counter(r["reason"] for r in sample.rejects)),
        "instances_read": instance_report.as_dict(), "passages_read": passage_report.as_dict(),
        "seconds": round(time.perf_counter() - start, 2),
    }
    write_text(stats_path, json.dumps(stats, indent=2) + "\n")
    failed = sum(teacher.failed.values())
    if failed:
        raise RaypipeError(f"{failed} teacher requests failed after retries; D_critic in {out} is "
                           "incomplete. Rerun to retry them (labels received so far are cached).")
    (out / "_SUCCESS").write_text("")
    logger.info("D_critic: %d train and %d dev examples in %s", sizes["train"], sizes["dev"], out)
    return stats


def read_split(out_dir: str | Path, split: str) -> pa.Table:
    """All parts of one split of a D_critic folder, as one table."""
    import pyarrow.parquet as pq

    parts = sorted(Path(out_dir, split).glob("part-*.parquet"))
    if not parts:
        raise RaypipeError(f"no {split} parts in {out_dir}: run `raypipe label` first")
    stale = [p for p in parts if "example" not in pq.read_schema(p).names]
    if stale:
        raise RaypipeError(f"{stale[0]} has no `example` column (written by an older `raypipe label`): "
                           f"delete {out_dir} and relabel")
    return pa.concat_tables([pq.read_table(p, schema=CRITIC_SCHEMA) for p in parts])


def split_examples(table: pa.Table) -> list[CriticExample]:
    """The judgements of a split's rows, in row order, as the critic's consumers pass them to a critic."""
    rows = zip(table.column("aspect").to_pylist(), table.column("example").to_pylist(), strict=True)
    return [row_example(aspect, fields) for aspect, fields in rows]

