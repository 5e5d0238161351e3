"""The index build behind `raypipe index build` (raypipe.jobs.index): passages -> embedding shards (Ray Data) -> one faiss index + passages + manifest.

Steps, each durable so a rerun redoes only what changed:
1. embed every input file into `embeddings/<stem>.parquet` (embed.py; current shards are skipped);
2. check the corpus: not empty, every id unique across files;
3. train the index on a seeded sample of the shards' vectors (GPU k-means when faiss-gpu is present);
4. add the shards: for IVF indexes in parallel Ray tasks, one per shard, whose partial indexes are
   merged in shard order with ids shifted (so ids stay positions in the passages file); other kinds
   (Flat, HNSW, refine wrappers) cannot merge and are added shard by shard, HNSW using all cores;
5. write index.faiss, passages.arrow (index order), manifest.json, stats.json and `_SUCCESS`; a rebuild
   removes the manifest and `_SUCCESS` first, so one that stops halfway (a full disk) leaves no index a
   loader or a rerun would take as whole.
The index steps are skipped when `_SUCCESS` and the manifest show the same factory over the same shards.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raypipe.data.io import list_data_files
from raypipe.disk import warn_if_short_of_space, write_text
from raypipe.errors import ConfigError, DataError
from raypipe.retrieval import index as faiss_index
from raypipe.retrieval.embed import (
    REJECTS_DIR,
    embed_shards,
    read_passages,
    read_stamp,
    read_vectors,
    shard_path,
    shard_rows,
)
from raypipe.retrieval.manifest import INDEX_FILE, MANIFEST_FILE, PASSAGES_FILE, Manifest
from raypipe.retrieval.store import write_passages
from raypipe.settings.data import LimitsConfig
from raypipe.settings.retrieval import EncoderConfig, IndexConfig

logger = logging.getLogger(__name__)

SUCCESS_FILE = "_SUCCESS"
STATS_FILE = "stats.json"
_VERSIONED = ("faiss-cpu", "faiss-gpu-cu12", "torch", "transformers", "pyarrow", "ray")


def check_corpus(files: list[Path], shards: list[Path], where: str) -> list[int]:
    """Rows per shard. DataError when the corpus has no valid passage or an id occurs in two files
    (duplicates inside one file are caught while embedding it)."""
    counts = [shard_rows(s) for s in shards]
    if sum(counts) == 0:
        raise DataError(f"the passage corpus is empty: no valid passage in {len(files)} file(s)", file=where)
    ids = [pq.read_table(s, columns=["id"]).column("id") for s in shards]
    every = pa.chunked_array([chunk for column in ids for chunk in column.chunks], type=pa.string())
    if len(pc.unique(every)) == len(every):
        return counts
    tally = pc.value_counts(every)
    duplicate = tally.field("values").filter(pc.greater(tally.field("counts"), 1))[0].as_py()
    holders = [f for f, column in zip(files, ids, strict=True) if pc.any(pc.equal(column, duplicate)).as_py()]
    raise DataError(f"passage id occurs in several files ({', '.join(f.name for f in holders)}); ids must be "
                    "unique across the corpus", file=str(holders[0]), row_id=duplicate, field="id")


def sample_vectors(shards: list[Path], counts: list[int], size: int, seed: int) -> np.ndarray:
    """A uniform sample without replacement over all shards, read one shard at a time."""
    total = sum(counts)
    picks = np.sort(np.random.default_rng(seed).choice(total, size=min(size, total), replace=False))
    bounds = np.cumsum([0, *counts])
    parts = []
    for shard, lo, hi in zip(shards, bounds[:-1], bounds[1:], strict=True):
        rows = picks[(picks >= lo) & (picks < hi)] - lo
        if len(rows):
            parts.append(read_vectors(shard)[rows])
    return np.concatenate(parts)


def add_shard(trained: np.ndarray, shard: str, use_gpu: bool) -> np.ndarray:
    """Ray task body: a trained empty IVF index (serialized) plus one shard's vectors, ids 0..n-1."""
    index = faiss_index.deserialize(trained)
    work = faiss_index.to_gpu(index) if use_gpu and faiss_index.gpu_available() else index
    work.add(read_vectors(Path(shard)))
    return faiss_index.serialize(index if work is index else faiss.index_gpu_to_cpu(work))


def add_in_parallel(trained: faiss.Index, shards: list[Path], use_gpu: bool) -> faiss.Index:
    import ray

    gpus = 1 if use_gpu and ray.cluster_resources().get("GPU", 0) > 0 else 0
    task = ray.remote(num_gpus=gpus)(add_shard)
    blob = ray.put(faiss_index.serialize(trained))
    refs = [task.remote(blob, str(s), use_gpu) for s in shards]
    merged: faiss.Index | None = None
    for ref in refs:  # in shard order, one part in memory at a time
        part = faiss_index.deserialize(ray.get(ref))
        if merged is None:
            merged = part
        else:
            merged.merge_from(part, merged.ntotal)
    return merged


def build_index(shards: list[Path], counts: list[int], dim: int, cfg: IndexConfig) -> faiss.Index:
    """Train (when the factory needs it) and fill an index from the embedding shards, in shard order."""
    index = faiss_index.make_index(cfg.factory, dim, cfg.metric)
    faiss_index.set_build_params(index, ef_construction=cfg.ef_construction)
    if not index.is_trained:
        sample = sample_vectors(shards, counts, cfg.train_sample, cfg.seed)
        try:
            index = faiss_index.train(index, sample, cfg.use_gpu)
        except RuntimeError as exc:
            raise ConfigError(f"retrieval.index.factory {cfg.factory!r}: training on {len(sample)} vectors "
                              f"failed (a smaller IVF list count or PQ size may fit this corpus): {exc}") from exc
    if faiss_index.is_ivf(index) and len(shards) > 1:
        return add_in_parallel(index, shards, cfg.use_gpu)
    for shard in shards:
        index.add(read_vectors(shard))
    return index


def _versions() -> dict[str, str]:
    found = {}
    for name in _VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _build_settings(cfg: IndexConfig) -> dict[str, Any]:
    return {"train_sample": cfg.train_sample, "seed": cfg.seed, "ef_construction": cfg.ef_construction}


def _index_is_current(out_dir: Path, cfg: IndexConfig, shards: list[dict[str, Any]]) -> bool:
    if not (out_dir / SUCCESS_FILE).is_file() or not (out_dir / MANIFEST_FILE).is_file():
        return False
    previous = Manifest.read(out_dir)
    return ((previous.factory, previous.metric, previous.build_settings, previous.shards)
            == (cfg.factory, cfg.metric, _build_settings(cfg), shards))


@dataclass
class IndexBuild:
    manifest: Manifest
    #: True when the index files were already current and left as they were
    skipped: bool
    #: reader reject counts by reason over the whole corpus
    rejects: dict[str, int]


def assemble_index(out_dir: Path, files: list[Path], normalize: bool, cfg: IndexConfig) -> IndexBuild:
    """Steps 2-5 over the embedding shards of `files` (which must all be current)."""
    shards = [shard_path(out_dir, f) for f in files]
    counts = check_corpus(files, shards, cfg.passages)
    stamps = [read_stamp(s) for s in shards]
    entries = [{"shard": s.name, "rows": n, **stamp} for s, n, stamp in zip(shards, counts, stamps, strict=True)]
    rejects: dict[str, int] = {}
    for stamp in stamps:
        for reason, count in stamp["rejects"].items():
            rejects[reason] = rejects.get(reason, 0) + count
    if _index_is_current(out_dir, cfg, entries):
        logger.info("index in %s is current; nothing to rebuild", out_dir)
        return IndexBuild(Manifest.read(out_dir), True, rejects)
    start = time.perf_counter()
    # the manifest goes too: written last, it is what tells a loader that index and passages are whole
    for marker in (SUCCESS_FILE, MANIFEST_FILE):
        (out_dir / marker).unlink(missing_ok=True)
    index = build_index(shards, counts, stamps[0]["dim"], cfg)
    faiss_index.write(index, out_dir / INDEX_FILE)
    write_passages((read_passages(s) for s in shards), out_dir / PASSAGES_FILE)
    manifest = Manifest(encoder=stamps[0]["encoder"], dim=stamps[0]["dim"], normalize=normalize,
                        metric=cfg.metric, factory=cfg.factory, count=int(index.ntotal),
                        build_seconds=round(time.perf_counter() - start, 3),
                        built_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        shards=entries, versions=_versions(), build_settings=_build_settings(cfg))
    manifest.write(out_dir)
    return IndexBuild(manifest, False, rejects)


#: vector width assumed for an `hf` encoder, whose width is known only once it is loaded: BERT-large's,
#: the widest of the encoders the papers use (MiniLM's is 384)
WIDEST_ENCODER_DIM = 1024


def _rows_of(file: Path) -> int:
    """Rows of a passage file: parquet's footer says; a jsonl file is one row per line."""
    if file.suffix == ".parquet":
        return pq.read_metadata(file).num_rows
    with file.open("rb") as fh:
        return sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 20), b""))


def index_bytes_estimate(files: list[Path], encoder_cfg: EncoderConfig) -> int:
    """The most an index build of `files` should write: the text three times (the embedding shards,
    passages.arrow uncompressed, and the input's own size again as slack for Arrow's buffers) and every
    vector twice (the shards and a Flat index, the largest kind) in float32. An upper end, for a warning."""
    dim = 384 if encoder_cfg.kind == "minilm" else WIDEST_ENCODER_DIM
    text = sum(f.stat().st_size for f in files)
    return 3 * text + 2 * sum(_rows_of(f) for f in files) * dim * 4


def build_index_folder(encoder_cfg: EncoderConfig, index_cfg: IndexConfig, limits: LimitsConfig) -> dict[str, Any]:
    """Build (or bring up to date) the index of `index_cfg.passages` in `index_cfg.out_dir`, embedding
    on the running Ray instance; rows over `limits` are rejected."""
    out_dir = Path(index_cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = list_data_files(index_cfg.passages)
    warn_if_short_of_space(out_dir, index_bytes_estimate(files, encoder_cfg), "index build")
    embed_stats = embed_shards(files, out_dir, encoder_cfg, index_cfg, limits)
    start = time.perf_counter()
    built = assemble_index(out_dir, files, encoder_cfg.normalize, index_cfg)
    manifest, embedded = built.manifest, embed_stats["rows_embedded"]
    stats = {
        "out_dir": str(out_dir), "n_passages": manifest.count, "factory": manifest.factory,
        "encoder": manifest.encoder, "dim": manifest.dim,
        "shards": embed_stats["shards"], "shards_embedded": embed_stats["embedded"],
        "shards_skipped": embed_stats["skipped"], "rows_embedded": embedded,
        "embed_seconds": round(embed_stats["embed_seconds"], 3),
        "embed_rows_per_s": round(embedded / embed_stats["embed_seconds"], 1) if embedded else 0.0,
        "index_skipped": built.skipped, "index_seconds": round(time.perf_counter() - start, 3),
        "rejects": built.rejects, "rejects_dir": str(out_dir / REJECTS_DIR) if built.rejects else None,
    }
    write_text(out_dir / STATS_FILE, json.dumps(stats, indent=2) + "\n")
    (out_dir / SUCCESS_FILE).touch()
    logger.info("index %s: %d passages (%s)", out_dir, manifest.count, manifest.factory)
    return stats
