"""The per-instance working state that Algorithm 3's stages fill in, one field per stage.

Rows travel between Ray Data stages with their original columns plus one `state` column holding this
structure as JSON. A JSON string keeps the Arrow schema flat and stable while the nested content
(passages per segment, labels per passage) grows, and it makes each stage's contribution auditable:
the final row records every decision and every random choice.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from raypipe.retrieval.types import Passage


@dataclass
class SegmentState:
    text: str
    #: three-way retrieve token for this segment ([Retrieval] / [No Retrieval] / [Continue ...])
    decision: str | None = None
    passages: list[Passage] = field(default_factory=list)
    is_rel: list[str] = field(default_factory=list)
    #: IsSup per passage; None where the passage was judged irrelevant (IsSup is not asked)
    is_sup: list[str | None] = field(default_factory=list)
    chosen: int | None = None
    #: how `chosen` was picked: "best" (relevant + supported, highest score) or "random"
    chosen_by: str | None = None


@dataclass
class InstanceState:
    retrieve: bool | None = None
    retrieve_probs: dict[str, float] = field(default_factory=dict)
    #: the top-K for the input and the whole output (App. A.2's "passages ... relevant to the entire
    #: output"); the first is the evidence each segment's Retrieve is judged against
    initial_passages: list[Passage] = field(default_factory=list)
    segments: list[SegmentState] = field(default_factory=list)
    utility: str | None = None
    #: the sampling policy's verdict (row_sampling.py): dropped rows are kept in the stream, flagged, so
    #: a shard's row count stays checkable; `copies` > 1 means the row is up-sampled
    keep: bool = True
    copies: int = 1
    #: also write the row with an [Irrelevant] passage in place of a chosen one (row_sampling.py)
    contrast: bool = False
    #: also write the row with a [Relevant] but unsupporting passage in place of a chosen one
    unsupported: bool = False
    random_draws: dict[str, float] = field(default_factory=dict)

    @property
    def first_evidence(self) -> Passage | None:
        return self.initial_passages[0] if self.initial_passages else None

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | None) -> InstanceState:
        if not raw:
            return cls()
        data: dict[str, Any] = json.loads(raw)
        initial = data.pop("initial_passages", [])
        segs = data.pop("segments", [])
        return cls(
            **data,
            initial_passages=[Passage(**p) for p in initial],
            segments=[
                SegmentState(**{**s, "passages": [Passage(**p) for p in s.get("passages", [])]})
                for s in segs
            ],
        )


def seeded_uniform(seed: int, *parts: object) -> float:
    """A uniform draw in [0, 1) that depends only on (seed, parts), never on batch split or order.

    Ray Data may batch and schedule rows differently on every run; hashing the row id keeps every
    random choice reproducible, which is what makes a resumed run give the same final output.
    """
    key = "|".join(str(p) for p in (seed, *parts)).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
