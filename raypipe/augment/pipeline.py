"""`raypipe augment` (raypipe.jobs.augment): Algorithm 3 as one streaming Ray Data pipeline over the instance shards.

Shape of the job:

    read parquet shards -> validate -> [critic] retrieve decision + IsUse -> segment (spaCy)
    -> [retriever] top-K for the whole output -> [critic] per-segment retrieve -> [retriever] top-K per segment
    -> [critic] IsRel / IsSup / choose -> render + sampling policy -> driver writes one output shard
    per input shard as soon as its last row arrives.

The model-bearing steps (`algorithm_steps`) run in Ray Data actor pools that load their models once.
Two layouts share the step list: `fused` (the default) gives each actor the critic, the retriever and
the splitter and runs every step on its batch, so on CPU there is one busy single-threaded process per
core and no handoffs; `staged` gives each run of steps on one model its own pool and resources (the
critic on GPUs with vLLM, retrieval on CPUs), which is what a GPU cluster wants. Validation and
rendering are stateless tasks. Execution keeps
the input order, so the driver holds at most about one shard in memory and a shard's output is
complete exactly when its row count is reached. Finished shards are skipped on a rerun, and every
random choice is seeded by row id, so a resumed run writes the same bytes as an uninterrupted one.
Last, the collapse check (`raypipe.augment.collapse`) sets D_gen's labels beside the teacher's on a
sample of the same rows and warns, or fails the job, when the critic answered one label everywhere.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raypipe import tokens as T
from raypipe.augment import stages
from raypipe.augment.collapse import announce, run_collapse_check
from raypipe.augment.row_sampling import apply_sampling
from raypipe.augment.stages import REJECT, REJECT_DETAIL, REJECT_FIELD
from raypipe.augment.state import InstanceState
from raypipe.data.io import list_data_files, validate_batch, write_jsonl, write_parquet
from raypipe.data.schemas import INSTANCE_SCHEMA
from raypipe.disk import remove_stale_temps, warn_if_short_of_space, write_text
from raypipe.errors import ConfigError, DataError
from raypipe.heap import MemoryWatch, release_freed_memory
from raypipe.logs import ProgressLog
from raypipe.settings.augment import AugmentConfig
from raypipe.settings.cluster import RayConfig
from raypipe.settings.data import LimitsConfig, SegmentationConfig
from raypipe.settings.retrieval import RetrievalConfig
from raypipe.settings.teachers import TeacherConfig

logger = logging.getLogger(__name__)

SOURCE = "path"
#: the settings the finished shards of an output folder were made with (see `check_settings`)
SETTINGS_FILE = "settings.json"
OUTPUT_COLUMNS = ("id", "instruction", "input", "output", "dataset")


# --- stage wrappers (run inside Ray Data workers) ------------------------------------------------


def _on_good_rows(batch: dict[str, np.ndarray], fn: Callable[[dict], dict]) -> dict[str, np.ndarray]:
    """Apply a stage to the rows that passed validation; rejected rows ride along untouched (new
    columns get "") so the driver can count every row of a shard."""
    good = np.array([not r for r in batch[REJECT]], dtype=bool)
    if good.all():
        return fn(batch)
    out = {k: np.array(v, dtype=object) for k, v in batch.items()}
    if good.any():
        done = fn({k: v[good] for k, v in batch.items()})
        for col, values in done.items():
            if col not in out:
                out[col] = np.array([""] * len(good), dtype=object)
            out[col][good] = values
    return out


def validate(batch: pa.Table, limits: LimitsConfig) -> dict[str, np.ndarray]:
    """Flag rows that would break a stage (missing fields, wrong types, empty or over-long fields,
    invalid UTF-8) with their reason; every row goes on, so the driver can count each shard's rows.

    Takes the Arrow batch as read (`batch_format="pyarrow"`): turning a string column that holds
    invalid UTF-8 into numpy fails the whole batch, so that conversion waits until the bad cells are
    known. Rejects are matched to rows by position, not id: a bad row may repeat a good row's id.
    Every column comes out as valid text in the instance schema, whatever the shard's own schema.
    """
    n = batch.num_rows
    paths = [str(p) for p in batch.column(SOURCE).to_pylist()] if SOURCE in batch.column_names else [""] * n
    table = batch.drop_columns([SOURCE]) if SOURCE in batch.column_names else batch
    good, rejects = validate_batch(table, "instance", paths[0] if n else "<unknown>", limits=limits)
    if good.num_rows + len(rejects) != n:
        raise DataError("validation lost rows", file=paths[0] if n else None)
    bad = {r["line"] - 1: r for r in rejects}
    names = INSTANCE_SCHEMA.names
    kept = {name: iter(good.column(name).to_pylist()) for name in names}
    cols: dict[str, list[str]] = {name: [] for name in (*names, REJECT, REJECT_FIELD, REJECT_DETAIL)}
    for i in range(n):
        record = bad.get(i)
        for name in names:
            cols[name].append(next(kept[name]) if record is None else "")
        if record is not None:
            cols["id"][-1] = record["id"] or ""
        cols[REJECT].append("" if record is None else record["reason"])
        cols[REJECT_FIELD].append("" if record is None else record["field"] or "")
        cols[REJECT_DETAIL].append("" if record is None else record["detail"])
    out = {name: np.array(values, dtype=object) for name, values in cols.items()}
    out[SOURCE] = np.array(paths, dtype=object)
    out["state"] = np.array([InstanceState().to_json() for _ in range(n)], dtype=object)
    return out


def render(batch: dict[str, np.ndarray], cfg: AugmentConfig) -> dict[str, np.ndarray]:
    """Render each augmented output and apply the sampling policy (keep / copies in the state)."""

    def fn(b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        states = [InstanceState.from_json(s) for s in b["state"]]
        outputs = []
        for i, state in enumerate(states):
            text = stages.render(state)
            apply_sampling(state, str(b["id"][i]), str(b["dataset"][i]), text, cfg.sampling)
            outputs.append(text)
        out = stages.store_states(b, states)
        out["augmented"] = np.array(outputs, dtype=object)
        return out

    return _on_good_rows(batch, fn)


#: One of Algorithm 3's model-bearing steps: the keyword its model is passed as, and the batch function.
Step = tuple[str, Callable]


def algorithm_steps(a: AugmentConfig, top_k: int, limits: LimitsConfig | None = None) -> list[Step]:
    """Algorithm 3 between validation and rendering, in order (the benchmark's sequential loop runs
    the same list)."""
    max_sentences = (limits or LimitsConfig()).max_output_sentences
    return [
        ("critic", stages.decide_retrieval),
        ("critic", stages.judge_utility),
        ("split_many", functools.partial(stages.segment_outputs, max_sentences=max_sentences)),
        ("retriever", functools.partial(stages.first_retrieval, k=top_k)),
        ("critic", stages.decide_segments),
        ("retriever", functools.partial(stages.retrieve_segments, k=top_k)),
        ("critic", functools.partial(stages.critique_passages, seed=a.sampling.seed)),
    ]


@dataclass(frozen=True)
class AugmentSections:
    """The config sections augmentation reads: its own, the index it searches (and K), the sentence
    splitter, the row limits, and the teacher its collapse check asks (`label.teacher`)."""

    augment: AugmentConfig
    retrieval: RetrievalConfig
    segmentation: SegmentationConfig
    limits: LimitsConfig
    teacher: TeacherConfig


def load_models(kinds: set[str], s: AugmentSections) -> dict[str, Any]:
    """The models `kinds` names: the critic (an LM critic on `augment.critic_engine`), the retriever (faiss index and
    encoder) and the sentence splitter (spaCy)."""
    models: dict[str, Any] = {}
    if "critic" in kinds:
        from raypipe.critic.predict import make_predictor

        models["critic"] = make_predictor(s.augment.critic, batch_size=s.augment.critic_batch_size,
                                           precision=s.augment.critic_precision,
                                           engine_kind=s.augment.critic_engine)
    if "retriever" in kinds:
        from raypipe.retrieval.retriever import load_retriever

        models["retriever"] = load_retriever(s.retrieval)
    if "split_many" in kinds:
        from raypipe.data.segment import Segmenter

        models["split_many"] = Segmenter(s.segmentation).split_many
    return models


#: The memory an actor asks Ray for: bytes, and the setting they come from (named in its warnings).
MemoryRequest = tuple[int, str]


class StepRunner:
    """Actor: loads the models of its steps once, then runs the steps over each batch in order.

    `memory` (from `actor_pool`) is what the actor asked Ray for: after each batch it warns when its
    RSS nears that, naming the setting to raise; None (the splitter's pool, a local run) watches nothing."""

    def __init__(self, steps: list[Step], sections: AugmentSections, memory: MemoryRequest | None = None):
        self.steps = steps
        self.models = load_models({kind for kind, _ in steps}, sections)
        self.watch = MemoryWatch(*memory) if memory else None

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for kind, fn in self.steps:
            batch = _on_good_rows(batch, functools.partial(fn, **{kind: self.models[kind]}))
        release_freed_memory()  # the batch's tensors are freed: without this the actor's RSS only grows
        if self.watch:  # after the trim, so only memory still in use counts
            self.watch.check_process()
        return batch


# --- the driver ----------------------------------------------------------------------------------


def step_groups(steps: list[Step], layout: str) -> list[list[Step]]:
    """`fused`: all steps in one actor; `staged`: one actor pool per run of steps on the same model."""
    if layout == "fused":
        return [steps]
    groups: list[list[Step]] = []
    for step in steps:
        if groups and groups[-1][0][0] == step[0]:
            groups[-1].append(step)
        else:
            groups.append([step])
    return groups


def actor_pool(a: AugmentConfig, kinds: set[str]) -> tuple[int, dict[str, float], MemoryRequest | None]:
    """Actors, per-actor resources (Ray's `num_cpus` or `num_gpus`, and `memory` in bytes for the
    actors that hold a model) and that memory request with its setting (for `StepRunner`'s warning)
    of one step group."""
    import torch

    if a.layout == "fused":
        size, cpus, setting = a.workers, a.worker_cpus, "worker_memory_gib"
    elif "critic" in kinds:
        size, cpus, setting = a.critic_actors, a.critic_cpus, "critic_memory_gib"
    elif "retriever" in kinds:
        size, cpus, setting = a.retriever_actors, a.retriever_cpus, "retriever_memory_gib"
    else:  # the splitter (spaCy's rule-based sentencizer by default): no model to make room for
        return 1, {"num_cpus": a.task_cpus}, None
    # the value read by the name the warning gives, so the two cannot disagree
    request = (int(getattr(a, setting) * 2**30), f"augment.{setting}")
    memory = {"memory": request[0]}
    if "critic" in kinds and torch.cuda.is_available():
        return size, {"num_gpus": a.critic_gpus, **memory}, request
    return size, {"num_cpus": cpus, **memory}, request


def build_dataset(files: list[str], s: AugmentSections):
    """The lazy Ray Data plan over `files`; nothing runs until it is iterated."""
    import ray.data
    from ray.data import ActorPoolStrategy

    a = s.augment
    task = {"batch_format": "numpy", "batch_size": a.batch_size, "num_cpus": a.task_cpus}
    ds = ray.data.read_parquet(files, include_paths=True, num_cpus=a.task_cpus)
    # A parquet shard is read as one block, and an actor works through its block batch after batch
    # before handing anything on: without this split the stages would take turns on a shard instead
    # of overlapping. Streaming repartition cuts blocks to one batch each, keeping the order.
    ds = ds.repartition(target_num_rows_per_block=a.batch_size)
    ds = ds.map_batches(validate, fn_kwargs={"limits": s.limits}, **{**task, "batch_format": "pyarrow"})
    for group in step_groups(algorithm_steps(a, s.retrieval.top_k, s.limits), a.layout):
        size, resources, request = actor_pool(a, {kind for kind, _ in group})
        ds = ds.map_batches(StepRunner, fn_constructor_kwargs={"steps": group, "sections": s, "memory": request},
                            batch_format="numpy", batch_size=a.batch_size, compute=ActorPoolStrategy(size=size),
                            **resources)
    ds = ds.map_batches(render, fn_kwargs={"cfg": a}, **task)
    return ds


class ShardWriter:
    """Collects rows per input shard (in input order) and writes each shard once it is complete."""

    def __init__(self, out_dir: Path, expected: dict[str, int], seen_ids: set[str]):
        self.data_dir = out_dir / "data"
        #: the released Self-RAG jsonl shape, apart from data/ so readers of data/ see one format
        self.jsonl_dir = out_dir / "jsonl"
        self.rejects_dir = out_dir / "rejects"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_dir.mkdir(parents=True, exist_ok=True)
        self.rejects_dir.mkdir(parents=True, exist_ok=True)
        self.expected = expected
        self.pending: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.seen_ids = seen_ids
        self.written: list[str] = []
        self.counts_dir = out_dir / "shard_counts"
        self.counts_dir.mkdir(parents=True, exist_ok=True)

    def add(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            src = str(row[SOURCE])
            self.pending[src].append(row)
            if len(self.pending[src]) == self.expected[src]:
                self.flush(src)

    def flush(self, src: str) -> None:
        """Write the shard of input file `src` (called when its last row arrives, or for an empty file)."""
        rows = self.pending.pop(src, [])
        kept: list[dict[str, Any]] = []
        rejects: list[dict[str, Any]] = []
        counts: Counter = Counter(input=len(rows))
        # rows arrive in input order (preserve_order), so the position is the row number in the file
        for position, row in enumerate(rows, start=1):
            rid = str(row["id"])
            if row[REJECT]:
                rejects.append({"file": src, "row": position, "id": rid, "reason": row[REJECT],
                                "field": row[REJECT_FIELD] or None, "detail": row[REJECT_DETAIL]})
                continue
            if rid in self.seen_ids:
                rejects.append({"file": src, "row": position, "id": rid, "reason": "duplicate_id",
                                "field": "id", "detail": f"id {rid!r} already seen"})
                continue
            self.seen_ids.add(rid)
            state = InstanceState.from_json(row["state"])
            if not state.keep:
                counts["dropped_by_sampling"] += 1
                continue
            counts["kept"] += 1
            outputs = [(rid if copy == 0 else f"{rid}#up{copy}", row["augmented"]) for copy in range(state.copies)]
            if state.contrast:
                outputs.append((f"{rid}#contrast", stages.render_contrast(state)))
                counts["contrast_rows"] += 1
            if state.unsupported:
                outputs.append((f"{rid}#unsupported", stages.render_unsupported(state)))
                counts["unsupported_rows"] += 1
            for out_id, output in outputs:
                kept.append({
                    "id": out_id, "instruction": row["instruction"], "input": row["input"], "output": output,
                    "dataset": row["dataset"], "source_id": rid, "state": row["state"],
                })
        stem = Path(src).name.removesuffix(".parquet")
        counts.update(rejected=len(rejects), written=len(kept))
        write_jsonl(rejects, self.rejects_dir / f"{stem}.rejects.jsonl")
        write_text(self.counts_dir / f"{stem}.json", json.dumps(dict(counts)) + "\n")
        write_jsonl([{k: r[k] for k in OUTPUT_COLUMNS} for r in kept], self.jsonl_dir / f"{stem}.jsonl")
        # parquet last: its presence marks the shard finished for a rerun
        write_parquet(_table(kept), self.data_dir / f"{stem}.parquet")
        self.written.append(stem)
        logger.info("wrote shard %s: %d rows kept of %d, %d rejected", stem, len(kept), len(rows), len(rejects))
        if rejects:
            logger.warning("%s: rejected %d rows %s (%s)", src, len(rejects),
                           dict(Counter(r["reason"] for r in rejects)), self.rejects_dir / f"{stem}.rejects.jsonl")


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    cols = (*OUTPUT_COLUMNS, "source_id", "state")
    return pa.table({c: pa.array([r[c] for r in rows], type=pa.string()) for c in cols})


def _shard_stats(out_dir: Path) -> dict[str, Any]:
    """Statistics over every finished shard (so a resumed run reports the whole corpus)."""
    data_dir, rejects_dir = out_dir / "data", out_dir / "rejects"
    row_counts: Counter = Counter()
    for f in sorted(data_dir.glob("*.parquet")):
        row_counts.update(json.loads((out_dir / "shard_counts" / f"{f.stem}.json").read_text()))
    by_dataset: dict[str, Counter] = defaultdict(Counter)
    token_counts: Counter = Counter()
    rejects: Counter = Counter()
    n_rows = 0
    for f in sorted(data_dir.glob("*.parquet")):
        t = pq.read_table(f, columns=["id", "output", "dataset"]).to_pydict()
        for rid, out, ds in zip(t["id"], t["output"], t["dataset"], strict=True):
            n_rows += 1
            if "#up" in rid:
                by_dataset[ds]["upsampled"] += 1
                continue
            copy = next((kind for kind in ("contrast", "unsupported") if f"#{kind}" in rid), None)
            if copy:  # its tokens are D_gen's: the [Irrelevant] or [No support] it teaches is the point
                by_dataset[ds][copy] += 1
                token_counts.update(T.parse(out).tokens())
                continue
            by_dataset[ds]["rows"] += 1
            by_dataset[ds]["retrieve_yes"] += T.RETRIEVAL in out
            token_counts.update(T.parse(out).tokens())
    for f in sorted(rejects_dir.glob("*.rejects.jsonl")):
        # "\n" only: JSON lines may hold U+2028 or U+0085 unescaped, where splitlines() also cuts
        for line in f.read_text(encoding="utf-8").split("\n"):
            if line:
                rejects[json.loads(line)["reason"].split(":")[0]] += 1
    return {
        "row_counts": {k: row_counts[k] for k in ("input", "kept", "dropped_by_sampling", "rejected", "written")},
        "rows_written": n_rows,
        "retrieve_yes_share": {ds: round(c["retrieve_yes"] / max(c["rows"], 1), 3)
                               for ds, c in sorted(by_dataset.items())},
        "rows_per_dataset": {ds: c["rows"] for ds, c in sorted(by_dataset.items())},
        "upsampled_rows": sum(c["upsampled"] for c in by_dataset.values()),
        "contrast_rows": sum(c["contrast"] for c in by_dataset.values()),
        "unsupported_rows": sum(c["unsupported"] for c in by_dataset.values()),
        "token_distribution": dict(sorted(token_counts.items())),
        "rejects": dict(rejects),
    }


def parquet_shards(instances: str) -> list[str]:
    """The parquet shards to augment. Any other data file there is an error rather than skipped:
    the job streams parquet through Ray Data and knows when a shard is complete (and whether a rerun
    can skip it) from the row count in its footer, which JSON lines do not have; converting them
    first with the validating reader keeps their bad rows in rejects/ instead of failing the read."""
    all_files = list_data_files(instances)
    others = [f.name for f in all_files if f.suffix != ".parquet"]
    if others:
        raise DataError(f"augment reads parquet shards only, and this folder also holds {', '.join(others)}: "
                        "convert them (raypipe.data.io.read_records + write_parquet, which puts bad rows in "
                        "rejects/) or move them out", file=str(instances))
    return [str(f) for f in all_files]


def output_settings(s: AugmentSections) -> dict[str, Any]:
    """The settings that decide what an output row holds (not how fast it is made): the critic and
    index used, K, sampling, segmentation and limits."""
    return {
        "critic": str(Path(s.augment.critic).resolve()),
        "index": str(Path(s.retrieval.index.out_dir).resolve()),
        "top_k": s.retrieval.top_k,
        "sampling": s.augment.sampling.model_dump(),
        "spacy_model": s.segmentation.spacy_model,
        "limits": s.limits.model_dump(),
    }


#: the passage lists an output row's `state` records, in `retrieval.top_k` passages each: the first
#: retrieval's and one per segment, for the ~4 sentences of a typical output (docs/cluster.md)
PASSAGE_LISTS_PER_ROW = 5
#: bytes of one recorded passage: a 100-word Wikipedia passage with its title, id and JSON keys
PASSAGE_BYTES = 800


def output_bytes_estimate(files: list[str], rows: int, top_k: int) -> int:
    """The most the output of `rows` instances read from `files` should take: their text twice (the
    parquet shard and its jsonl copy), at the input's own size, plus the passages each row's state
    records. Passages counted uncompressed: an upper end, the figure of a warning, not a quota."""
    input_bytes = sum(Path(f).stat().st_size for f in files)
    return 2 * input_bytes + rows * top_k * PASSAGE_LISTS_PER_ROW * PASSAGE_BYTES


def check_settings(out_dir: Path, settings: dict[str, Any], n_done: int) -> None:
    """Refuse to add shards to a folder whose finished shards were made with other settings.

    A rerun resumes: it keeps the finished shards and writes the rest. With other settings (another
    config, or other --set values) the folder would end up holding two
    data sets that look like one, and training would read both. Refusing, with the differences and
    the ways out, is what a user resuming a run needs; a folder without finished shards just takes
    the new settings.
    """
    path = out_dir / SETTINGS_FILE
    if n_done and path.exists():
        recorded = json.loads(path.read_text())
        diff = [f"{key}: {recorded.get(key)!r} there, {value!r} now" for key, value in settings.items()
                if recorded.get(key) != value]
        if diff:
            raise ConfigError(f"{out_dir} holds {n_done} finished shard(s) made with other settings ("
                              + "; ".join(diff) + "); rerun with the config that made them, or write to "
                              "another folder (--out), or delete this one")
    elif n_done:
        logger.warning("%s: %d finished shards with no record of their settings; resuming with the current "
                       "ones", out_dir, n_done)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(settings, indent=2, sort_keys=True) + "\n")


def augment(s: AugmentSections, ray_cfg: RayConfig, progress_every_s: float) -> dict[str, Any]:
    """Run Algorithm 3 over `augment.instances` into `augment.out_dir` on the Ray instance `ray_cfg`
    names, resuming at the first unfinished shard; progress every `progress_every_s` seconds."""
    import ray

    from raypipe.runtime import ensure_ray

    a = s.augment
    out_dir = Path(a.out_dir)
    data_dir = out_dir / "data"
    files = parquet_shards(a.instances)
    # a driver killed mid-write leaves its temp files (a rerun would never overwrite them)
    remove_stale_temps([out_dir, *(out_dir / d for d in ("data", "jsonl", "rejects", "shard_counts"))])
    done = {f.name.removesuffix(".parquet") for f in data_dir.glob("*.parquet")}
    check_settings(out_dir, output_settings(s), len(done))
    todo = [f for f in files if Path(f).name.removesuffix(".parquet") not in done]
    seen_ids: set[str] = set()
    for f in sorted(data_dir.glob("*.parquet")):
        seen_ids.update(i for i in pq.read_table(f, columns=["source_id"])["source_id"].to_pylist())
    logger.info("augment: %d input shards, %d already done, %d to run", len(files), len(done), len(todo))

    start = time.perf_counter()
    n_in = 0
    ray_stats = ""
    (out_dir / "_SUCCESS").unlink(missing_ok=True)  # a run that stops (a full disk, a collapse) leaves none
    if todo:
        expected = {f: pq.ParquetFile(f).metadata.num_rows for f in todo}
        estimate = output_bytes_estimate(todo, sum(expected.values()), s.retrieval.top_k)
        warn_if_short_of_space(out_dir, estimate, "augment")
        ensure_ray(ray_cfg)
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        writer = ShardWriter(out_dir, expected, seen_ids)
        ds = build_dataset(todo, s)
        progress = ProgressLog("augment", sum(expected.values()), every_s=progress_every_s)
        for batch in ds.iter_batches(batch_format="pandas", batch_size=a.batch_size):
            rows = batch.to_dict(orient="records")
            n_in += len(rows)
            writer.add(rows)
            progress.step(len(rows))
        empty = [f for f, n in expected.items() if n == 0]
        for f in empty:
            writer.flush(f)
        ray_stats = ds.stats()
    wall = time.perf_counter() - start

    stats = {
        "input_shards": len(files), "shards_skipped": len(done), "shards_written": len(todo),
        "instances_processed": n_in, "wall_s": round(wall, 1),
        "instances_per_s": round(n_in / wall, 2) if n_in and wall else 0.0,
        **_shard_stats(out_dir),
    }
    stats["collapse_check"] = run_collapse_check(a.collapse_check, s.teacher, out_dir, files)
    write_text(out_dir / "stats.json", json.dumps(stats, indent=2) + "\n")
    if ray_stats:
        write_text(out_dir / "ray_data_stats.txt", ray_stats)
    announce(stats["collapse_check"], a.collapse_check, s.teacher.kind)
    (out_dir / "_SUCCESS").touch()
    return stats
