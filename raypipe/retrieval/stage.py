"""The retrieval step of a Ray Data pipeline: a callable class that adds a `passages` column.

Loading an index and an encoder takes seconds and gigabytes, so the class loads them once per actor
(`map_batches(RetrievalStage, compute=ActorPoolStrategy(...))`) and every batch is one batched search.
"""

from __future__ import annotations

import numpy as np

from raypipe.config import RetrievalConfig
from raypipe.retrieval.retriever import load_retriever


class RetrievalStage:
    """Adds `output_column`: for each row, a list of {id, title, text, score} dicts, best first."""

    def __init__(self, cfg: RetrievalConfig, k: int | None = None, query_column: str = "query",
                 output_column: str = "passages"):
        self.retriever = load_retriever(cfg)
        self.k = k or cfg.top_k
        self.query_column, self.output_column = query_column, output_column

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        hits = self.retriever.search([str(q) for q in batch[self.query_column]], self.k)
        # filled element by element: np.array(list of equal-length lists) would make a 2-D array
        column = np.empty(len(hits), dtype=object)
        for i, row in enumerate(hits):
            column[i] = [hit.as_dict() for hit in row]
        return {**batch, self.output_column: column}
