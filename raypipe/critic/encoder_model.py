"""The encoder critic's network: a pretrained encoder, mean-pooled, and one linear layer whose outputs
are the aspects' label groups (`raypipe.critic.encoder.GROUP_START`).

Mean pooling, not the first token: all-MiniLM-L6-v2 was trained as a sentence encoder through the
mean of its token states, and its first-token state barely varies between inputs (a head on it
did not learn Retrieve-from-the-input, which the mean-pooled head learns in a few steps). The folder
is the encoder's HF folder plus `aspect_heads.safetensors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from raypipe.critic.encoder import NUM_OUTPUTS, group_mask
from raypipe.errors import ModelError
from raypipe.prompts import Aspect
from raypipe.training.freeze import freeze_bottom

HEADS_FILE = "aspect_heads.safetensors"


class AspectHeads(nn.Module):
    """encoder -> mean over the attended tokens -> NUM_OUTPUTS logits."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.heads = nn.Linear(encoder.config.hidden_size, NUM_OUTPUTS)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return self.heads(pooled)


def group_logits(logits: torch.Tensor, aspects: Sequence[Aspect]) -> torch.Tensor:
    """`logits` with every output outside a row's own aspect group at -inf: a softmax (or the
    cross-entropy) over a row then runs over its aspect's labels alone."""
    mask = torch.from_numpy(group_mask(aspects)).to(logits.device)
    return logits.masked_fill(~mask, float("-inf"))


def load_aspect_heads(folder: str | Path, layers: int | None = None) -> tuple[AspectHeads, Any]:
    """(model, tokenizer) from a local folder: a trained critic (its heads file is read) or a bare
    encoder (fresh heads, drawn from torch's current seed). `layers` keeps the encoder's first N."""
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoTokenizer

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ModelError(f"encoder folder not found or has no config.json: {folder}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        encoder = AutoModel.from_pretrained(folder, add_pooling_layer=False, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ModelError(f"{folder}: cannot load an encoder: {exc}") from exc
    if layers is not None and layers < len(encoder.encoder.layer):
        encoder.encoder.layer = encoder.encoder.layer[:layers]
        encoder.config.num_hidden_layers = layers
    model = AspectHeads(encoder)
    if (folder / HEADS_FILE).is_file():
        model.heads.load_state_dict(load_file(folder / HEADS_FILE))
    return model, tokenizer


def freeze_for_training(model: AspectHeads, trainable_layers: int | None) -> None:
    """The word embeddings never train: they are half of MiniLM's weights, a few thousand labels cannot
    improve them, and their AdamW update costs as much as a forward on CPU. With `trainable_layers`
    under the encoder's layer count, the embeddings and every encoder layer below the top N are frozen
    too, so the backward pass stops at the lowest trainable layer (as `training.freeze` does for an
    LM: N >= the layer count changes nothing)."""
    model.encoder.embeddings.word_embeddings.weight.requires_grad_(False)
    freeze_bottom(model.encoder.encoder.layer, trainable_layers, model.encoder.embeddings)


def save_aspect_heads(model: AspectHeads, tokenizer: Any, folder: Path) -> None:
    from safetensors.torch import save_file

    model.encoder.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    save_file({k: v.contiguous() for k, v in model.heads.state_dict().items()}, folder / HEADS_FILE)
