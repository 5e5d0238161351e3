"""Passages in index order, as one Arrow IPC file that is memory-mapped on load.

faiss returns row positions; the store turns them into (id, title, text). Memory-mapping means 21M
passages (~13 GB of text) cost no RAM up front: the OS pages in what lookups touch, and several
retriever actors on one node share those pages.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from raypipe.data.schemas import PASSAGE_SCHEMA
from raypipe.disk import atomic_path


def write_passages(tables: Iterable[pa.Table], path: Path) -> int:
    """Stream tables (PASSAGE_SCHEMA columns, in index order) into `path` atomically; returns rows."""
    rows = 0
    with atomic_path(path) as tmp, pa.OSFile(str(tmp), "wb") as sink, ipc.new_file(sink, PASSAGE_SCHEMA) as writer:
        for table in tables:
            writer.write_table(table.select(PASSAGE_SCHEMA.names).cast(PASSAGE_SCHEMA))
            rows += table.num_rows
    return rows


class PassageStore:
    """Read-only, memory-mapped passages addressed by index position."""

    def __init__(self, path: Path):
        self.path = path
        self._table = ipc.open_file(pa.memory_map(str(path), "r")).read_all()

    def __len__(self) -> int:
        return self._table.num_rows

    def lookup(self, positions: np.ndarray) -> list[dict[str, Any]]:
        """Rows at `positions` (any order, repeats allowed) as {id, title, text} dicts."""
        return self._table.take(pa.array(np.asarray(positions, dtype=np.int64))).to_pylist()
