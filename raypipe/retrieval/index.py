"""faiss index: creation from a factory string, training, search parameters, GPU placement, files.

Any `faiss.index_factory` string works (`Flat`, `HNSW32`, `IVF4096,PQ64`, `IVF4096_HNSW32,PQ64`,
`IVF1024,PQ32,RFlat` ...). Search-time knobs are applied by what the index contains rather than by its
name, so `nprobe` reaches an IVF index even when it is wrapped in a refine step or a pre-transform.
"""

from __future__ import annotations

import logging
from pathlib import Path

import faiss
import numpy as np

from raypipe.disk import atomic_path

logger = logging.getLogger(__name__)

METRICS = {"ip": faiss.METRIC_INNER_PRODUCT, "l2": faiss.METRIC_L2}


def make_index(factory: str, dim: int, metric: str) -> faiss.Index:
    """An empty index; a bad factory string is a ValueError naming it (faiss' own message is C++)."""
    try:
        return faiss.index_factory(dim, factory, METRICS[metric])
    except RuntimeError as exc:
        raise ValueError(f"faiss cannot build factory {factory!r} for dim {dim}: {exc}") from exc


def is_ivf(index: faiss.Index) -> bool:
    """True for a bare IVF index: the only kind whose shard-wise parts can be merged with ids shifted."""
    return isinstance(faiss.downcast_index(index), faiss.IndexIVF)


def _hnsw_parts(index: faiss.Index) -> list[faiss.IndexHNSW]:
    """The HNSW graphs inside an index: itself, or an IVF's coarse quantizer."""
    parts = [faiss.downcast_index(index)]
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        parts.append(faiss.downcast_index(ivf.quantizer))
    return [p for p in parts if isinstance(p, faiss.IndexHNSW)]


def set_build_params(index: faiss.Index, *, ef_construction: int) -> None:
    """Build-time knobs (before training/adding): HNSW efConstruction, wherever an HNSW graph is."""
    for hnsw in _hnsw_parts(index):
        hnsw.hnsw.efConstruction = ef_construction


def set_search_params(index: faiss.Index, *, nprobe: int, ef_search: int, k_factor: int) -> None:
    """Apply every search knob that this index has (nprobe, efSearch, quantizer efSearch, k_factor)."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        ivf.nprobe = min(nprobe, ivf.nlist)
    for hnsw in _hnsw_parts(index):
        hnsw.hnsw.efSearch = ef_search
    top = faiss.downcast_index(index)
    if isinstance(top, faiss.IndexRefine):
        top.k_factor = float(k_factor)


def gpu_available() -> bool:
    """faiss-gpu installed and a CUDA device visible (faiss-cpu wheels lack StandardGpuResources)."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def to_gpu(index: faiss.Index) -> faiss.Index:
    """The index on all visible GPUs when it can live there; otherwise unchanged (HNSW has no GPU
    implementation, for one). The CPU index stays the one written to disk."""
    try:
        return faiss.index_cpu_to_all_gpus(index)
    except (RuntimeError, AttributeError) as exc:
        logger.info("index stays on CPU (%s)", exc)
        return index


def train(index: faiss.Index, sample: np.ndarray, use_gpu: bool) -> faiss.Index:
    """Train the quantizers on `sample`; k-means runs on GPU when asked and possible. Returns a CPU
    index either way, because shards are added in separate processes from its serialized form."""
    if index.is_trained:
        return index
    if len(sample) == 0:
        raise ValueError("cannot train an index on an empty sample")
    logger.info("training %s on %d vectors", type(faiss.downcast_index(index)).__name__, len(sample))
    work = to_gpu(index) if use_gpu and gpu_available() else index
    work.train(np.ascontiguousarray(sample, dtype=np.float32))
    return index if work is index else faiss.index_gpu_to_cpu(work)


def write(index: faiss.Index, path: Path) -> None:
    """`index` must be a CPU index. Atomic: a crash mid-write never leaves a truncated index.faiss that
    loads as garbage. Written through a Python file, whose errors keep their errno (a full disk is named
    as such) and whose close fails loudly; faiss' own file writer only prints a failed close."""
    with atomic_path(path) as tmp, tmp.open("wb") as fh:
        faiss.write_index(index, faiss.PyCallbackIOWriter(fh.write))


def read(path: Path, *, mmap: bool) -> faiss.Index:
    flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if mmap else 0
    return faiss.read_index(str(path), flags)


def serialize(index: faiss.Index) -> np.ndarray:
    return faiss.serialize_index(index)


def deserialize(data: np.ndarray) -> faiss.Index:
    return faiss.deserialize_index(data)


def search(index: faiss.Index, vectors: np.ndarray, k: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(scores, positions), both (n, k), best first, higher score better for either metric (l2
    distances are negated); a position of -1 means fewer than k results were found."""
    distances, positions = index.search(np.ascontiguousarray(vectors, dtype=np.float32), k)
    return (distances if metric == "ip" else -distances), positions
