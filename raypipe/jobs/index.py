"""`raypipe index build` and `raypipe index search`: the dense index (raypipe.retrieval)."""

from __future__ import annotations

from typing import Any

from raypipe.config import RaypipeConfig
from raypipe.retrieval.build import build_index_folder
from raypipe.retrieval.retriever import load_retriever
from raypipe.runtime import ensure_ray


def run_build_index(cfg: RaypipeConfig) -> dict[str, Any]:
    """Build (or bring up to date) the index of `retrieval.index.passages` in `retrieval.index.out_dir`."""
    ensure_ray(cfg.ray)
    return build_index_folder(cfg.retrieval.encoder, cfg.retrieval.index, cfg.limits)


def run_search(cfg: RaypipeConfig, queries: list[str]) -> dict[str, Any]:
    """The top-k of a few queries as {query: ["title [id] score", ...]}, for the job summary table (a
    smoke check that an index answers sensibly)."""
    hits = load_retriever(cfg.retrieval).search(queries, cfg.retrieval.top_k)
    return {query: [f"{h.title} [{h.id}] {h.score:.3f}" for h in row] for query, row in zip(queries, hits, strict=True)}
