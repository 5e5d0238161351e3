"""The encoder critic as a predictor: a trained folder (raypipe.critic.encoder: its layout and manifest;
raypipe.critic.encoder_model: the heads) filling each judgement's aspect distribution."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from raypipe.critic.encoder import GROUP_START, InputFormat, encode_examples, read_manifest
from raypipe.critic.encoder_model import group_logits, load_aspect_heads
from raypipe.critic.predictor import ReflectionPredictor
from raypipe.prompts import ASPECT_LABELS, CriticExample, critic_prompt
from raypipe.settings.models import DecodePrecision


class EncoderCritic(ReflectionPredictor):
    """A trained encoder critic: batches examples longest-first (little padding) and returns each
    one's aspect distribution, in input order; its weights in the dtype `decoding_dtype` picks for
    `precision` (fp32 by default: see `augment.critic_precision`)."""

    def __init__(self, folder: str | Path, *, batch_size: int = 64, device: str | None = None,
                 precision: DecodePrecision = "fp32"):
        import torch

        from raypipe.models.device import decoding_dtype, pick_device

        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        self.max_length = int(self.manifest["max_length"])
        self.input_format: InputFormat = self.manifest["input"]
        self.device = device or pick_device()
        model, self.tokenizer = load_aspect_heads(self.folder)
        self.model = model.to(self.device, dtype=decoding_dtype(precision, self.device)).eval()
        self.batch_size = batch_size
        self._torch = torch

    def distributions(self, examples: Sequence[CriticExample]) -> list[np.ndarray]:
        out: list[np.ndarray] = [np.empty(0)] * len(examples)
        size = [len(critic_prompt(ex)) for ex in examples]
        order = sorted(range(len(examples)), key=lambda i: size[i], reverse=True)
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            for i, dist in zip(rows, self._batch([examples[i] for i in rows]), strict=True):
                out[i] = dist
        return out

    def _batch(self, examples: list[CriticExample]) -> list[np.ndarray]:
        aspects = [ex.aspect for ex in examples]
        batch = encode_examples(self.tokenizer, examples, self.input_format, self.max_length).to(self.device)
        with self._torch.inference_mode():
            logits = group_logits(self.model(**batch).float(), aspects)
        probs = self._torch.softmax(logits, dim=-1).cpu().numpy().astype(np.float64)
        return [probs[row, GROUP_START[a]:GROUP_START[a] + len(ASPECT_LABELS[a])] for row, a in enumerate(aspects)]
