"""`raypipe data synth`: write the synthetic knowledge world (ARCHITECTURE.md §5).

Layout under `cfg.out_dir`: passages/ and web/passages/ (PASSAGE_SCHEMA shards), instances/
(INSTANCE_SCHEMA shards, training only), eval/heldout_{qa,fact,mc,noret,longform}.jsonl, config.json, world.json,
_SUCCESS. A finished world gains eval splits added since it was written (each split has its own
seed, so the others keep their bytes).

Streaming: every shard is generated from its own seeded RNG and the on-demand `World`, in batches, and
written atomically; nothing is held across shards, so memory depends on `shard_size`, not on
`instances`. Determinism: the same config gives the same bytes in every file except the `timing` entry
of world.json. Reruns skip shards already written (a shard file exists only once it is complete).
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from raypipe.data.io import write_jsonl, write_parquet
from raypipe.data.schemas import INSTANCE_SCHEMA, PASSAGE_SCHEMA
from raypipe.data.world_entities import World
from raypipe.data.world_passages import passage, web_passage
from raypipe.data.world_tasks import (
    BUILDERS,
    DATASET_TASK,
    EVAL_SPLITS,
    Draft,
    check_mix,
    fact_verification_twins,
    heldout_split,
)
from raypipe.disk import write_text
from raypipe.errors import ConfigError
from raypipe.settings.data import WorldConfig

logger = logging.getLogger(__name__)

#: rows converted to Arrow at a time; bounds the Python objects alive while a shard is built
_BATCH_ROWS = 4096
#: below this many instances a progress bar is noise
_PROGRESS_MIN = 10_000


def _shard_path(folder: Path, k: int) -> Path:
    return folder / f"part-{k:05d}.parquet"


def _write_shard(path: Path, schema: pa.Schema, rows: Iterator[dict[str, str]],
                 on_batch: Callable[[int], object]) -> None:
    """Convert rows to Arrow batch by batch (compact), then write the shard atomically."""
    batches = []
    batch: list[dict[str, str]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == _BATCH_ROWS:
            batches.append(pa.RecordBatch.from_pylist(batch, schema=schema))
            on_batch(len(batch))
            batch = []
    if batch:
        batches.append(pa.RecordBatch.from_pylist(batch, schema=schema))
        on_batch(len(batch))
    write_parquet(pa.Table.from_batches(batches, schema=schema), path)


def _instance_rows(world: World, k: int) -> Iterator[dict[str, str]]:
    """Shard `k`'s instances. A fact-verification instance drawn for a twin (`world.fact_twins`) is
    followed by its contradicting twin as the next instance, where the shard has room for both."""
    cfg = world.cfg
    rng = random.Random(world.hash.bits("instance-shard", k))
    datasets = [d for d in BUILDERS if cfg.mix.get(d, 0) > 0]
    weights = [cfg.mix[d] for d in datasets]
    end = min(cfg.instances, (k + 1) * cfg.shard_size)
    twin: Draft | None = None
    for idx in range(k * cfg.shard_size, end):
        if twin is not None:
            yield twin.row(f"i{idx:07d}", "fact_verification")
            twin = None
            continue
        dataset = rng.choices(datasets, weights)[0]
        imperfect = rng.random() < cfg.imperfect_fraction
        # the twin draw only where twins are on: a world without them keeps its bytes
        if dataset == "fact_verification" and cfg.fact_twins > 0 and idx + 1 < end and rng.random() < cfg.fact_twins:
            draft, twin = fact_verification_twins(world, rng, imperfect)
        else:
            draft = BUILDERS[dataset](world, rng, imperfect)
        yield draft.row(f"i{idx:07d}", dataset)


def _passage_rows(make: Callable[[int], tuple[str, str, str]], n_rows: int, shard_size: int,
                  k: int) -> Iterator[dict[str, str]]:
    for i in range(k * shard_size, min(n_rows, (k + 1) * shard_size)):
        pid, title, text = make(i)
        yield {"id": pid, "title": title, "text": text}


def _write_shards(folder: Path, n_rows: int, shard_size: int, schema: pa.Schema,
                  rows_of: Callable[[int], Iterator[dict[str, str]]],
                  on_rows: Callable[[int], object] = lambda n: None) -> int:
    """Write every missing shard of `folder`; returns how many were skipped as already written."""
    skipped = 0
    for k in range(math.ceil(n_rows / shard_size)):
        path = _shard_path(folder, k)
        if path.exists():
            skipped += 1
            on_rows(min(shard_size, n_rows - k * shard_size))
            continue
        _write_shard(path, schema, rows_of(k), on_rows)
    return skipped


def _claim_out_dir(out: Path, cfg: WorldConfig) -> None:
    """Record the config a world is built from; refuse to mix shards of two different worlds."""
    wanted = cfg.model_dump(exclude={"out_dir"})
    path = out / "config.json"
    if path.exists():
        # a key added since that world was written reads as its default: the world is still the same
        defaults = {k: f.default for k, f in WorldConfig.model_fields.items() if k in wanted}
        found = {**defaults, **json.loads(path.read_text())}
        if found != wanted:
            diff = sorted(k for k in wanted.keys() | found.keys() if wanted.get(k) != found.get(k))
            raise ConfigError(f"world.out_dir {str(out)!r} holds a world built with a different config "
                              f"(differs in {', '.join('world.' + k for k in diff)}); use another "
                              f"world.out_dir or delete that folder")
        return
    out.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(wanted, indent=2, sort_keys=True) + "\n")


def _write_eval(world: World, heldout: list[int], out: Path) -> dict[str, int]:
    """The held-out splits: questions about the `heldout` people and their biographies
    (heldout_longform), answerable only from passages/web, and instructions that need no retrieval
    (heldout_noret); each split's items distinct (`heldout_split`). Returns the items each holds."""
    counts = {}
    wanted = world.cfg.eval_instances if heldout else 0
    for split in EVAL_SPLITS:
        path = out / "eval" / f"{split}.jsonl"
        if path.exists():
            counts[split] = _count_lines(path)
            continue
        rows = heldout_split(world, split, heldout, wanted, random.Random(world.hash.bits(f"eval:{split}", 0)))
        write_jsonl(rows, path)
        counts[split] = len(rows)
        # the biographies: one per held-out person by design
        if len(rows) < (min(wanted, len(heldout)) if split == "heldout_longform" else wanted):
            logger.warning("%s holds %d distinct items, not world.eval_instances=%d: %d held-out people hold no "
                           "more; raise world.heldout_fraction or world.instances for a larger eval",
                           path, len(rows), wanted, len(heldout))
    if not heldout and world.cfg.eval_instances:
        logger.warning("no held-out people in this world (world.heldout_fraction=%s): eval splits are empty",
                       world.cfg.heldout_fraction)
    return counts


def _count_lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def _instance_counts(folder: Path) -> dict[str, dict[str, int]]:
    """Counts per task and dataset, read back from the shards (so skipped shards count too)."""
    datasets: collections.Counter[str] = collections.Counter()
    for path in sorted(folder.glob("part-*.parquet")):
        datasets.update(pq.read_table(path, columns=["dataset"]).column("dataset").to_pylist())
    tasks: collections.Counter[str] = collections.Counter()
    for dataset, n in datasets.items():
        tasks[DATASET_TASK[dataset]] += n
    return {"task": dict(sorted(tasks.items())), "dataset": dict(sorted(datasets.items()))}


def synthesize(cfg: WorldConfig) -> dict[str, Any]:
    """Write the world to `cfg.out_dir` and return its stats (also written to world.json)."""
    start = time.perf_counter()
    check_mix(cfg.mix)
    world = World(cfg)
    out = Path(cfg.out_dir)
    _claim_out_dir(out, cfg)
    if (out / "_SUCCESS").exists():
        stats = json.loads((out / "world.json").read_text())
        if stats.get("n_web_passages") != world.n_web_passages:
            # same config, other code: a world written before the web corpus became pages (one a
            # person, work and look-alike) would pair its old web index with the new ground truth
            raise ConfigError(f"world.out_dir {str(out)!r} holds {stats.get('n_web_passages')} web passages where "
                              f"this version writes {world.n_web_passages}: it was written by an older "
                              "raypipe; delete that folder (and the web index and evaluator built from it)")
        missing = [s for s in EVAL_SPLITS if not (out / "eval" / f"{s}.jsonl").exists()]
        if missing:
            logger.info("%s: writing eval split(s) %s, added since this world was written", out, missing)
            stats["eval"] = _write_eval(world, world.heldout_people(), out)
            write_text(out / "world.json", json.dumps(stats, indent=2) + "\n")
        else:
            logger.info("%s already holds this world; nothing to do", out)
        return stats

    size = world.size
    logger.info("world: %d instances, %d people (%d distractors), %d works, %d organisations, %d cities, "
                "%d countries, %d passages", cfg.instances, size.people, size.distractors, size.works,
                size.orgs, size.cities, size.countries, world.n_passages)
    skipped = 0
    for folder, make, n_rows in ((out / "passages", passage, world.n_passages),
                                 (out / "web" / "passages", web_passage, world.n_web_passages)):
        rows_of = functools.partial(_passage_rows, functools.partial(make, world), n_rows, cfg.shard_size)
        skipped += _write_shards(folder, n_rows, cfg.shard_size, PASSAGE_SCHEMA, rows_of)
    show = sys.stderr.isatty() and cfg.instances >= _PROGRESS_MIN
    with tqdm(total=cfg.instances, desc="instances", unit="inst", disable=not show) as bar:
        skipped += _write_shards(out / "instances", cfg.instances, cfg.shard_size, INSTANCE_SCHEMA,
                                 functools.partial(_instance_rows, world), bar.update)
    if skipped:
        logger.info("skipped %d shard(s) already written by an earlier run", skipped)
    heldout = world.heldout_people()
    eval_counts = _write_eval(world, heldout, out)
    seconds = time.perf_counter() - start
    stats = {
        "seed": cfg.seed,
        "instances": cfg.instances,
        "counts": _instance_counts(out / "instances"),
        "n_passages": world.n_passages,
        "n_web_passages": world.n_web_passages,
        "n_entities": {"people": size.people, "distractors": size.distractors, "works": size.works,
                       "organisations": size.orgs, "cities": size.cities, "countries": size.countries,
                       "total": size.total},
        "n_heldout": len(heldout),
        "n_web_only": sum(world.person(i).web_only for i in heldout),
        "eval": eval_counts,
        "timing": {"seconds": round(seconds, 3), "instances_per_second": round(cfg.instances / seconds)},
    }
    write_text(out / "world.json", json.dumps(stats, indent=2) + "\n")
    (out / "_SUCCESS").touch()
    logger.info("wrote %s in %.1f s", out, stats["timing"]["seconds"])
    return stats
