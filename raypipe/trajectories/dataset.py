"""`raypipe self-reasoning data` (raypipe.jobs.trajectories): self-reasoning trajectories for training
questions, filtered by quality control (Self-Reasoning §"Data Generation and Quality Control",
Algorithm 1).

1. Questions: a seeded sample of `trajectories.questions` training instances of the configured
   datasets (short-form QA, fact verification, long form); bad rows go to rejects with a reason.
2. Retrieval (Ray Data, an actor pool holding the retriever): the top-K of every question.
3. Items: every question with its own top-K (a positive) and, for a seeded `negative_fraction` of
   them, also with another random question's top-K (a negative); the documents shuffled.
4. Teacher + quality control (Ray Data, one actor holding the teacher and the support checker): the
   reply is parsed strictly (an unparseable reply is discarded and counted by reason), then judged
   by Algorithm 1.
5. The funnel (generated -> replied -> parsed -> answer-correct -> citation-passed -> kept, per task
   and, for the oracle, per deliberate mistake), at most `max_kept` trajectories as training rows
   (and at most `max_kept_per_task` of a task).

Layout under `trajectories.out_dir`::

    train/part-00000.parquet   id, instance_id, task, negative, instruction, input, target (kept
                               trajectories; a claim's instruction carries Figure 6's task sentence)
    trajectories.jsonl         every item: docs, reply, parse outcome, QC verdict
    stats.json                 the funnel
    eval/heldout_longform.jsonl  the long-form eval set (biographies of held-out people)
    teacher_cache.jsonl        (openai teacher) every reply so far; a rerun skips these ids
    rejects/                   instances that failed validation or have no trajectory task
    _SUCCESS

A finished folder (`_SUCCESS`) is not redone; delete it to regenerate. One written with other
`methods.self_reasoning.processes` (another trajectory format) is refused, never reused.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from raypipe.data.io import read_records, write_jsonl, write_parquet
from raypipe.data.stable_random import stable_uniforms
from raypipe.disk import write_text
from raypipe.errors import DataError, RaypipeError
from raypipe.eval.citations import SupportChecker, make_checker
from raypipe.retrieval.types import Passage, Searcher
from raypipe.settings.cluster import RayConfig
from raypipe.settings.data import LimitsConfig, WorldConfig
from raypipe.settings.retrieval import RetrievalConfig
from raypipe.settings.teachers import QualityConfig, TrajectoryConfig
from raypipe.trajectories.items import TASK_OF_DATASET, Question, TrajectoryItem, make_item, question_of
from raypipe.trajectories.longform import LONGFORM_SET, write_longform_set
from raypipe.trajectories.quality import quality_control
from raypipe.trajectories.teachers import Reply, make_trajectory_teacher
from raypipe.trajectory_format import (
    ALL_PROCESSES,
    FACT_TASK,
    TrajectoryParseError,
    TrajectoryProcess,
    answers_for,
    format_documents,
    format_trajectory,
    parse_trajectory,
    task_question,
)

logger = logging.getLogger(__name__)

SearcherFactory = Callable[[], Searcher]
TRAIN_SCHEMA = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("instance_id", pa.string(), nullable=False),
    pa.field("task", pa.string(), nullable=False),
    pa.field("negative", pa.bool_(), nullable=False),
    pa.field("instruction", pa.string(), nullable=False),
    pa.field("input", pa.string(), nullable=False),
    pa.field("target", pa.string(), nullable=False),
])
#: funnel steps, in order
FUNNEL = ("generated", "replied", "parsed", "answer_correct", "citation_passed", "kept")


def sample_questions(rows: list[dict[str, Any]], cfg: TrajectoryConfig) -> tuple[list[Question], list[dict]]:
    """A seeded, order-independent sample of `cfg.questions` instances of `cfg.datasets` (rows ranked
    by a hash of seed and id), and rejects for rows of those datasets that cannot become questions."""
    wanted = [r for r in rows if r.get("dataset") in cfg.datasets]
    wanted.sort(key=lambda r: stable_uniforms(f"{cfg.seed}|sr-sample|{r['id']}")[0])
    questions, rejects = [], []
    for row in wanted:
        if len(questions) >= cfg.questions:
            break
        try:
            questions.append(question_of(row))
        except DataError as exc:
            rejects.append({"id": row.get("id"), "reason": "bad_instance", "field": exc.field, "detail": str(exc)})
    return questions, rejects


class RetrieveBatch:
    """Ray Data actor: `batch["query"]` -> `docs` (JSON list of passages, `Passage.as_dict`), the top-K."""

    def __init__(self, retrieval: RetrievalConfig, searcher_factory: SearcherFactory | None = None):
        from raypipe.retrieval import load_retriever

        self.top_k = retrieval.top_k
        self.searcher = searcher_factory() if searcher_factory else load_retriever(retrieval)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[str]]:
        hits = self.searcher.search([str(q) for q in batch["query"]], self.top_k)
        docs = [json.dumps([h.as_dict() for h in found]) for found in hits]
        return {"id": [str(i) for i in batch["id"]], "docs": docs}


def build_items(questions: list[Question], docs: dict[str, list[Passage]], cfg: TrajectoryConfig) -> list[TrajectoryItem]:
    """Positives for every question with documents, negatives for a seeded `negative_fraction` of them
    (the documents of another random question, §"Data Generation"), documents shuffled (seeded)."""
    rng = random.Random(cfg.seed)
    usable = [q for q in questions if docs.get(q.instance_id)]
    items: list[TrajectoryItem] = []
    for q in usable:
        shuffle = random.Random(f"{cfg.seed}|{q.instance_id}") if cfg.shuffle else None
        items.append(make_item(q, docs[q.instance_id], negative=False, rng=shuffle))
        if len(usable) > 1 and rng.random() < cfg.negative_fraction:
            other = q
            while other is q:
                other = usable[rng.randrange(len(usable))]
            items.append(make_item(q, docs[other.instance_id], negative=True, rng=shuffle))
    return items


def judge_reply(item: TrajectoryItem, reply: Reply, checker: SupportChecker, qc: QualityConfig,
                processes: Sequence[TrajectoryProcess] = ALL_PROCESSES) -> dict[str, Any]:
    """The row for one item: the reply, its parse outcome (`ok` or the reason it was discarded), the
    training target (the trajectory written with `processes`: all three, or Table 2's ablations
    without one) and the QC verdict (for parsed replies). The teacher always writes every process:
    quality control judges the whole trajectory."""
    row: dict[str, Any] = {"id": item.id, "item": item.to_json(), "reply": reply.text, "error": reply.error,
                           "parse": None, "target": None, "verdict": None}
    if reply.text is None:
        row["parse"] = "no_reply"
        return row
    try:
        trajectory = parse_trajectory(reply.text, len(item.docs), answers_for(item.task))
    except TrajectoryParseError as exc:
        row["parse"] = exc.reason
        return row
    row["parse"] = "ok"
    row["target"] = format_trajectory(trajectory, processes)
    row["verdict"] = json.dumps(quality_control(item, trajectory, checker, qc).as_dict())
    return row


class TeachBatch:
    """Ray Data actor: `batch["item"]` (TrajectoryItem JSON) -> one judged row per item."""

    def __init__(self, cfg: TrajectoryConfig, out_dir: str, processes: Sequence[TrajectoryProcess]):
        self.cfg, self.processes = cfg, processes
        self.teacher = make_trajectory_teacher(cfg.teacher, Path(out_dir))
        self.checker = make_checker(cfg.qc)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list]:
        items = [TrajectoryItem.from_json(str(text)) for text in batch["item"]]
        rows = [judge_reply(item, reply, self.checker, self.cfg.qc, self.processes)
                for item, reply in zip(items, self.teacher.teach(items), strict=True)]
        return {key: [r[key] for r in rows] for key in rows[0]} if rows else {}


def funnel(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts per funnel step (overall and per task), parse failures by reason, and for the oracle
    how many of each deliberate mistake reached each step (what QC caught)."""
    def steps(subset: list[dict[str, Any]]) -> dict[str, int]:
        verdicts = [json.loads(r["verdict"]) for r in subset if r["verdict"]]
        return {"generated": len(subset), "replied": sum(r["reply"] is not None for r in subset),
                "parsed": len(verdicts), "answer_correct": sum(v["answer_correct"] for v in verdicts),
                "citation_passed": sum(v["kept"] for v in verdicts)}

    by_task: dict[str, list] = defaultdict(list)
    by_error: dict[str, list] = defaultdict(list)
    for r in rows:
        by_task[json.loads(r["item"])["task"]].append(r)
        by_error[r["error"] or "none"].append(r)
    return {"overall": steps(rows), "per_task": {t: steps(rs) for t, rs in sorted(by_task.items())},
            "per_oracle_error": {e: steps(rs) for e, rs in sorted(by_error.items())},
            "discarded": dict(Counter(r["parse"] for r in rows if r["parse"] != "ok"))}


def training_row(item: TrajectoryItem, target: str) -> dict[str, Any]:
    """One training row: the student's question (`task_question`: a claim with Figure 6's task
    sentence) as the instruction, the numbered documents as the input, the trajectory as the target;
    the trainer writes the prompt in the base model's format, as decoding does
    (`trajectory_format.format_prompt`)."""
    return {"id": item.id, "instance_id": item.instance_id, "task": item.task, "negative": item.negative,
            "instruction": task_question(item.task, item.question), "input": format_documents(item.docs),
            "target": target}


def kept_rows(rows: list[dict[str, Any]], cfg: TrajectoryConfig) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The training rows: trajectories quality control passed, in a seeded order, each task up to its
    `max_kept_per_task`, all up to `max_kept`; and per task how many passed but were over its cap."""
    passed = [r for r in rows if r["verdict"] and json.loads(r["verdict"])["kept"]]
    passed.sort(key=lambda r: stable_uniforms(f"{cfg.seed}|sr-keep|{r['id']}")[0])
    per_task: Counter[str] = Counter()
    over_cap: Counter[str] = Counter()
    out = []
    for r in passed:
        if len(out) == cfg.max_kept:
            break
        item = TrajectoryItem.from_json(r["item"])
        if per_task[item.task] >= cfg.max_kept_per_task.get(item.task, cfg.max_kept):
            over_cap[item.task] += 1
            continue
        per_task[item.task] += 1
        out.append(training_row(item, r["target"]))
    return sorted(out, key=lambda r: r["id"]), dict(sorted(over_cap.items()))


def write_trajectories(tc: TrajectoryConfig, processes: list[TrajectoryProcess], retrieval: RetrievalConfig,
                       world: WorldConfig, limits: LimitsConfig, ray_cfg: RayConfig,
                       searcher_factory: SearcherFactory | None = None) -> dict[str, Any]:
    """Generate, parse and quality-control trajectories of `processes` (the Self-Reasoning method's)
    over `retrieval`'s index (or `searcher_factory`'s stand-in); write the training rows and the funnel
    to `tc.out_dir`, and the long-form eval set from `world` when `tc.longform_eval` asks."""
    import ray

    from raypipe.runtime import ensure_ray

    out = Path(tc.out_dir)
    stats_path = out / "stats.json"
    if (out / "_SUCCESS").exists() and stats_path.exists():
        done = json.loads(stats_path.read_text())
        written = done.get("processes", list(ALL_PROCESSES))  # folders from before the setting: all three
        if written != processes:
            raise RaypipeError(f"{out} holds trajectories written with processes {written}, not "
                               f"methods.self_reasoning.processes {processes}: set trajectories.out_dir to another "
                               "folder, or delete this one to regenerate")
        if done.get("fact_task") != FACT_TASK:
            raise RaypipeError(f"{out} holds training rows whose fact prompts lack Figure 6's task sentence, which "
                               "decoding asks with: delete this folder to regenerate")
        logger.info("%s is complete (_SUCCESS); delete it to regenerate", out)
        return {**done, "skipped": True}
    unknown = sorted(set(tc.datasets) - set(TASK_OF_DATASET))
    if unknown:
        raise RaypipeError(f"trajectories.datasets: {unknown} have no trajectory task; known: {sorted(TASK_OF_DATASET)}")
    start = time.perf_counter()
    (out / "_SUCCESS").unlink(missing_ok=True)
    table, report = read_records(tc.instances, "instance", out / "rejects" / "instances", limits=limits)
    questions, rejects = sample_questions(table.to_pylist(), tc)
    if rejects:
        write_jsonl(rejects, out / "rejects" / "questions.rejects.jsonl")
    if not questions:
        raise RaypipeError(f"no questions of datasets {tc.datasets} among {table.num_rows} valid instances in "
                           f"{tc.instances}")
    ensure_ray(ray_cfg)
    retrieved = ray.data.from_items([{"id": q.instance_id, "query": q.query} for q in questions]).map_batches(
        RetrieveBatch, fn_constructor_kwargs={"retrieval": retrieval, "searcher_factory": searcher_factory},
        compute=ray.data.ActorPoolStrategy(size=tc.actors), batch_size=tc.batch_size, num_cpus=tc.actor_cpus)
    docs = {r["id"]: [Passage(**d) for d in json.loads(r["docs"])] for r in retrieved.iter_rows()}
    items = build_items(questions, docs, tc)
    teacher = tc.teacher
    judged = ray.data.from_items([{"item": i.to_json()} for i in items]).map_batches(
        TeachBatch, fn_constructor_kwargs={"cfg": tc, "out_dir": str(out),
                                           "processes": processes},
        compute=ray.data.ActorPoolStrategy(size=1), batch_size=tc.batch_size, num_cpus=tc.actor_cpus)
    rows = sorted(judged.iter_rows(), key=lambda r: r["id"])
    write_jsonl(rows, out / "trajectories.jsonl")
    kept, over_task_cap = kept_rows(rows, tc)
    (out / "train").mkdir(parents=True, exist_ok=True)
    for old in (out / "train").glob("part-*.parquet"):
        old.unlink()
    write_parquet(pa.Table.from_pylist(kept, schema=TRAIN_SCHEMA), out / "train" / "part-00000.parquet")
    flow = funnel(rows)
    flow["overall"]["kept"] = len(kept)
    stats = {"out_dir": str(out), "teacher": teacher.kind, "error_rate": teacher.error_rate if teacher.kind == "oracle"
             else None, "checker": tc.qc.checker, "processes": processes, "fact_task": FACT_TASK,
             "questions": len(questions),
             "no_documents": len(questions) - sum(bool(docs.get(q.instance_id)) for q in questions),
             "items": len(items), "negatives": sum(i.negative for i in items), "funnel": flow,
             "kept_per_task": dict(Counter(r["task"] for r in kept)), "over_task_cap": over_task_cap,
             "question_rejects": len(rejects), "instances_read": report.as_dict(),
             "seconds": round(time.perf_counter() - start, 2)}
    if tc.longform_eval:
        stats["longform_eval"] = str(write_longform_set(world, out / "eval" / LONGFORM_SET, tc.longform_eval,
                                                        tc.seed))
    write_text(stats_path, json.dumps(stats, indent=2) + "\n")
    failed = flow["overall"]["generated"] - flow["overall"]["replied"]
    if failed:
        raise RaypipeError(f"{failed} teacher requests got no reply; {out} is incomplete. Rerun to retry them "
                           "(replies received so far are cached).")
    (out / "_SUCCESS").write_text("")
    logger.info("trajectories: %d generated, %d kept, in %s", len(items), len(kept), out)
    return stats
