"""Arrow schemas of the rows that flow through raypipe, and the per-row validation rules.

Every row carries a stable string `id` from ingest to the end (ARCHITECTURE.md §1). `meta` is a JSON string so
that heterogeneous ground truth (which passage supports which sentence, answer options, labels) fits
one Arrow column without a union type.
"""

from __future__ import annotations

import pyarrow as pa

INSTANCE_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("instruction", pa.string(), nullable=False),
        pa.field("input", pa.string(), nullable=False),
        pa.field("output", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("meta", pa.string(), nullable=False),
    ]
)

PASSAGE_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("title", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
    ]
)

#: Fields that must be non-empty after stripping whitespace; others may be "" (e.g. `input`).
NON_EMPTY: dict[str, tuple[str, ...]] = {
    "instance": ("id", "instruction", "output"),
    "passage": ("id", "text"),
}

SCHEMAS: dict[str, pa.Schema] = {"instance": INSTANCE_SCHEMA, "passage": PASSAGE_SCHEMA}
#: Fields a row may omit; they default to "" (instances from other sources often lack task/meta).
OPTIONAL_DEFAULTS: dict[str, dict[str, str]] = {
    "instance": {"input": "", "task": "", "dataset": "", "meta": "{}"},
    "passage": {"title": ""},
}
