"""Passage embedding with Ray Data: one embedding shard per input file, over an actor pool.

The unit of work is an input file. An actor reads and validates it (`read_records`, bad rows to
`rejects/`), embeds it in batches and writes `embeddings/<stem>.parquet` (id, title, text, embedding)
atomically, stamped with the source file's size and mtime and the encoder settings. A rerun skips every
shard whose stamp still matches, so an interrupted 21M-passage build resumes where it stopped, and an
edited input file (or a changed encoder) is re-embedded. Files as work units also keep the driver out
of the data path: only per-shard stats come back to it.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raypipe.data.io import read_records, write_parquet
from raypipe.data.schemas import PASSAGE_SCHEMA
from raypipe.errors import DataError, DiskFullError
from raypipe.settings.data import LimitsConfig
from raypipe.settings.retrieval import EncoderConfig, IndexConfig

logger = logging.getLogger(__name__)

EMBEDDINGS_DIR = "embeddings"
REJECTS_DIR = "rejects"
STAMP_KEY = b"raypipe.embedding"
#: encoder settings that change the vectors (batch size and device do not)
_VECTOR_FIELDS = ("kind", "path", "pooling", "normalize", "max_length", "include_title")


def shard_path(out_dir: Path, source: Path) -> Path:
    return out_dir / EMBEDDINGS_DIR / f"{source.stem}.parquet"


def source_stamp(source: Path, encoder_cfg: EncoderConfig) -> dict[str, Any]:
    """What a shard was made from; a shard is current while its stored stamp equals this."""
    stat = source.stat()
    return {"source": str(source.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
            "encoder_settings": {k: getattr(encoder_cfg, k) for k in _VECTOR_FIELDS}}


def read_stamp(shard: Path) -> dict[str, Any] | None:
    """The stamp stored in a shard's schema metadata, plus what the actor added: encoder name, dim and
    the reader's reject counts of the source file."""
    if not shard.is_file():
        return None
    metadata = pq.read_schema(shard).metadata or {}
    return json.loads(metadata[STAMP_KEY]) if STAMP_KEY in metadata else None


def is_current(shard: Path, stamp: dict[str, Any]) -> bool:
    stored = read_stamp(shard)
    return stored is not None and all(stored.get(k) == v for k, v in stamp.items())


def shard_rows(shard: Path) -> int:
    return pq.read_metadata(shard).num_rows


def read_vectors(shard: Path) -> np.ndarray:
    """The shard's embeddings as a float32 (rows, dim) array (zero-copy from the Arrow column)."""
    column = pq.read_table(shard, columns=["embedding"]).column("embedding").combine_chunks()
    dim = column.type.list_size
    return column.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim)


def read_passages(shard: Path) -> pa.Table:
    return pq.read_table(shard, columns=PASSAGE_SCHEMA.names)


def _first_rejected_id(rejects_path: str | None, reason: str) -> str | None:
    if not rejects_path:
        return None
    with open(rejects_path, encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            if record.get("reason") == reason:
                return record.get("id")
    return None


class ShardEmbedder:
    """Ray Data actor: holds the encoder; each call embeds whole input files into shards."""

    def __init__(self, encoder_cfg: EncoderConfig, batch_size: int, threads: int, rejects_dir: str,
                 limits: LimitsConfig | None = None):
        import torch

        from raypipe.retrieval.encoders import build_encoder

        torch.set_num_threads(threads)
        self.encoder = build_encoder(encoder_cfg, batch_size=batch_size)
        self.include_title = encoder_cfg.include_title
        self.rejects_dir = rejects_dir
        self.limits = limits

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        results = [self.embed_file(Path(source), Path(target), json.loads(stamp))
                   for source, target, stamp in zip(batch["source"], batch["target"], batch["stamp"],
                                                    strict=True)]
        return {key: [r[key] for r in results] for key in results[0]}

    def embed_file(self, source: Path, target: Path, stamp: dict[str, Any]) -> dict[str, Any]:
        """Embed one file; a duplicate id inside it stops before any embedding work, and a full disk
        stops the file with no shard written. Both are reported (`duplicate_id`, `disk_full`: the path
        that could not be written) and raised by the driver, so the job ends with our error rather than
        Ray Data's wrapper around an actor's traceback."""
        result = {"source": str(source), "shard": target.name, "rows": 0, "seconds": 0.0, "duplicate_id": "",
                  "disk_full": ""}
        try:
            return self._embed(source, target, stamp, result)
        except DiskFullError as exc:
            return {**result, "disk_full": exc.path}

    def _embed(self, source: Path, target: Path, stamp: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        from raypipe.retrieval.encoders import passage_texts

        table, report = read_records(source, "passage", rejects_dir=self.rejects_dir, limits=self.limits)
        result["rows"] = table.num_rows
        if report.rejects.get("duplicate_id"):
            result["duplicate_id"] = _first_rejected_id(report.rejects_path, "duplicate_id") or "?"
            return result
        start = time.perf_counter()
        texts = passage_texts(table.column("title").to_pylist(), table.column("text").to_pylist(),
                              self.include_title)
        vectors = self.encoder.encode(texts)
        result["seconds"] = time.perf_counter() - start
        embedding = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), self.encoder.dim)
        stamp = {**stamp, "encoder": self.encoder.name, "dim": self.encoder.dim, "rejects": report.rejects}
        shard = table.append_column("embedding", embedding)
        write_parquet(shard.replace_schema_metadata({STAMP_KEY: json.dumps(stamp)}), target)
        return result


def _cluster_has_gpus() -> bool:
    import ray

    return ray.cluster_resources().get("GPU", 0) > 0


def embed_shards(files: list[Path], out_dir: Path, encoder_cfg: EncoderConfig,
                 index_cfg: IndexConfig, limits: LimitsConfig | None = None) -> dict[str, Any]:
    """Embed every input file whose shard is missing or stale; returns per-run stats. Rows over
    `limits` (default: LimitsConfig's) are rejected like other bad rows.

    Raises DataError for a duplicate id inside a file (naming file and id). Ray must be initialized.
    """
    import ray

    stamps = {f: source_stamp(f, encoder_cfg) for f in files}
    pending = [f for f in files if not is_current(shard_path(out_dir, f), stamps[f])]
    stats: dict[str, Any] = {"shards": len(files), "skipped": len(files) - len(pending), "embedded": 0,
                             "rows_embedded": 0, "embed_seconds": 0.0, "actor_encode_seconds": 0.0}
    if not pending:
        logger.info("all %d embedding shards are current", len(files))
        return stats
    (out_dir / EMBEDDINGS_DIR).mkdir(parents=True, exist_ok=True)
    items = [{"source": str(f), "target": str(shard_path(out_dir, f)), "stamp": json.dumps(stamps[f])}
             for f in pending]
    actors = min(index_cfg.embed_actors, len(pending))
    logger.info("embedding %d of %d shards with %d actor(s)", len(pending), len(files), actors)
    start = time.perf_counter()
    ds = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
        ShardEmbedder,
        fn_constructor_kwargs={"encoder_cfg": encoder_cfg, "batch_size": index_cfg.embed_batch_size,
                               "threads": max(1, int(index_cfg.embed_actor_cpus)),
                               "rejects_dir": str(out_dir / REJECTS_DIR), "limits": limits},
        batch_size=1, compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=index_cfg.embed_actor_cpus, num_gpus=1 if _cluster_has_gpus() else 0,
    )
    results = ds.take_all()
    stats["embed_seconds"] = time.perf_counter() - start
    for r in results:
        if r["disk_full"]:
            raise DiskFullError(r["disk_full"])
        if r["duplicate_id"]:
            raise DataError("duplicate passage id in one file; ids must be unique across the corpus",
                            file=r["source"], row_id=r["duplicate_id"], field="id")
        stats["embedded"] += 1
        stats["rows_embedded"] += r["rows"]
        stats["actor_encode_seconds"] += r["seconds"]
    return stats
