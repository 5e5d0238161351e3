"""The index manifest: what built an index, so that loading it with another encoder fails loudly.

Vectors from two encoders (or one encoder with and without normalization) live in unrelated spaces; a
search across them returns confident nonsense. The manifest pins encoder name, dimension,
normalization and metric, and `check` compares them with what the caller is about to use.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from raypipe.disk import write_text
from raypipe.errors import IndexMismatchError

MANIFEST_FILE = "manifest.json"
INDEX_FILE = "index.faiss"
PASSAGES_FILE = "passages.arrow"


@dataclass
class Manifest:
    encoder: str
    dim: int
    normalize: bool
    metric: str
    factory: str
    count: int
    build_seconds: float = 0.0
    built_at: str = ""
    #: embedding shards in index order: name, rows, source file and its fingerprint
    shards: list[dict[str, Any]] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    #: the index settings beyond the factory that shape the index (training sample, seed, efConstruction)
    build_settings: dict[str, Any] = field(default_factory=dict)

    def write(self, index_dir: Path) -> Path:
        return write_text(index_dir / MANIFEST_FILE, json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, index_dir: Path) -> Manifest:
        path = index_dir / MANIFEST_FILE
        if not path.is_file():
            raise IndexMismatchError(f"{index_dir}: no {MANIFEST_FILE}; build the index with `raypipe index "
                                     "build` first")
        try:
            return cls(**json.loads(path.read_text()))
        except (json.JSONDecodeError, TypeError) as exc:
            raise IndexMismatchError(f"{path}: unreadable manifest: {exc}") from exc

    def check(self, *, encoder: str, dim: int, normalize: bool, metric: str, where: Path) -> None:
        """Raise IndexMismatchError listing every field that differs from what the caller uses."""
        wanted = {"encoder": encoder, "dim": dim, "normalize": normalize, "metric": metric}
        diffs = [f"{key}: index has {getattr(self, key)!r}, configured {value!r}"
                 for key, value in wanted.items() if getattr(self, key) != value]
        if diffs:
            raise IndexMismatchError(f"{where / MANIFEST_FILE}: index was built differently from the "
                                     f"configured retriever ({'; '.join(diffs)}); rebuild the index or fix "
                                     "retrieval.encoder / retrieval.index.metric")
