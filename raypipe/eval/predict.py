"""The eval job's Ray Data actor: the generator and the retriever loaded once, every decoding variant
(modes, threshold and weight sweeps) run on each batch.

Variants of one batch share a memo of engine calls and searches: an adaptive run at δ = 0.2 repeats
most of the `always` run's generations, so a sweep costs little more than its distinct decodings.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from raypipe.config import DecodeConfig, RetrievalConfig
from raypipe.eval.datasets import EvalItem
from raypipe.inference.engines import make_engine
from raypipe.inference.memo import MemoEngine, MemoRetriever
from raypipe.inference.retriever import Retriever, build_retriever
from raypipe.inference.selfrag import SelfRAGDecoder

logger = logging.getLogger(__name__)

RetrieverFactory = Callable[[], Retriever]


@dataclass(frozen=True)
class Variant:
    """One decoding configuration to evaluate; `sweep` and `value` say what it varies."""

    name: str
    sweep: str
    value: float | str
    decode: DecodeConfig


class EvalPredictor:
    """`batch["item"]`: `EvalItem.to_json()` strings. Returns one row per (item, variant) with the
    decoded result as JSON."""

    def __init__(self, generator: str, decode: dict[str, Any], variants: list[dict[str, Any]],
                 retrieval: dict[str, Any], retriever_factory: RetrieverFactory | None = None):
        self.engine = make_engine(generator, DecodeConfig.model_validate(decode))
        self.variants = [(v["name"], DecodeConfig.model_validate(v["decode"])) for v in variants]
        self.retriever: Retriever | None = None
        if any(cfg.mode != "never" for _, cfg in self.variants):
            factory = retriever_factory or partial(build_retriever, RetrievalConfig.model_validate(retrieval))
            self.retriever = factory()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[str]]:
        items = [EvalItem.from_json(text) for text in batch["item"]]
        requests = [item.request() for item in items]
        engine = MemoEngine(self.engine)
        retriever = MemoRetriever(self.retriever) if self.retriever is not None else None
        out: dict[str, list[str]] = {"variant": [], "item": [], "result": []}
        for name, cfg in self.variants:
            results = SelfRAGDecoder(engine, retriever, cfg).decode(requests)
            for item, result in zip(items, results, strict=True):
                out["variant"].append(name)
                out["item"].append(item.to_json())
                out["result"].append(json.dumps(result.as_dict(), ensure_ascii=False))
        return out
