"""Batched dense search over a built index directory: encode queries, search faiss, look up passages.

One DenseRetriever serves the augmentation pipeline (large batches), the decoding (a few queries per
segment) and the Serve app (online), so it does no per-call setup: the index, the encoder and the
memory-mapped passages are loaded once in the constructor.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from raypipe.retrieval import index as faiss_index
from raypipe.retrieval.encoders import Encoder, build_encoder
from raypipe.retrieval.manifest import INDEX_FILE, PASSAGES_FILE, Manifest
from raypipe.retrieval.store import PassageStore
from raypipe.retrieval.types import Passage
from raypipe.settings.retrieval import EncoderConfig, IndexConfig, RetrievalConfig

logger = logging.getLogger(__name__)


class DenseRetriever:
    """Search one index directory with the encoder that built it (checked against the manifest)."""

    def __init__(self, index_dir: str | Path, encoder: Encoder, *, normalize: bool, metric: str = "ip",
                 nprobe: int = 16, ef_search: int = 64, k_factor: int = 4, mmap: bool = False,
                 use_gpu: bool = True):
        self.index_dir = Path(index_dir)
        self.manifest = Manifest.read(self.index_dir)
        self.manifest.check(encoder=encoder.name, dim=encoder.dim, normalize=normalize, metric=metric,
                            where=self.index_dir)
        self.encoder, self.metric = encoder, metric
        index = faiss_index.read(self.index_dir / INDEX_FILE, mmap=mmap)
        faiss_index.set_search_params(index, nprobe=nprobe, ef_search=ef_search, k_factor=k_factor)
        self.index = faiss_index.to_gpu(index) if use_gpu and faiss_index.gpu_available() else index
        self.passages = PassageStore(self.index_dir / PASSAGES_FILE)
        logger.info("retriever on %s: %d passages, %s, encoder %s", self.index_dir, len(self.passages),
                    self.manifest.factory, encoder.name)

    @classmethod
    def from_config(cls, encoder_cfg: EncoderConfig, index_cfg: IndexConfig,
                    index_dir: str | Path | None = None) -> DenseRetriever:
        """The retriever of `index_cfg.out_dir` (or another built index dir, e.g. the web corpus)."""
        return cls(index_dir or index_cfg.out_dir, build_encoder(encoder_cfg),
                   normalize=encoder_cfg.normalize, metric=index_cfg.metric, nprobe=index_cfg.nprobe,
                   ef_search=index_cfg.ef_search, k_factor=index_cfg.refine_k_factor, mmap=index_cfg.mmap,
                   use_gpu=index_cfg.use_gpu)

    def search_vectors(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, positions) of the k nearest passages of each vector; -1 positions pad short lists."""
        return faiss_index.search(self.index, vectors, k, self.metric)

    def search(self, queries: list[str], k: int, requests: Sequence[int] | None = None) -> list[list[Passage]]:
        """The k best passages of each query, best first (fewer when the index has fewer); whose a
        query is changes nothing."""
        if not queries:
            return []
        scores, positions = self.search_vectors(self.encoder.encode(queries), k)
        found = positions >= 0
        rows = iter(self.passages.lookup(positions[found]))  # row-major: query by query, best first
        return [[Passage(score=float(score), **next(rows)) for score in row_scores[row_found]]
                for row_scores, row_found in zip(scores, found, strict=True)]


def load_retriever(cfg: RetrievalConfig) -> DenseRetriever:
    """The dense retriever of the configured index, with the encoder that built it."""
    return DenseRetriever.from_config(cfg.encoder, cfg.index)
