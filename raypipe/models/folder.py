"""A local Hugging Face model folder: its checks and its tokenizer, without a model library.

Kept apart from `load.py` (which needs torch) so that a process that only tokenizes, such as a Serve
Decoder replica, starts without importing torch: on 2 cores that import is most of a replica's
start-up. Nothing touches the hub (`local_files_only=True`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from raypipe.errors import ModelError
from raypipe.models.tokenizer import add_reflection_tokens

logger = logging.getLogger(__name__)

#: files any one of which makes a folder's tokenizer loadable by AutoTokenizer
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
#: tokenizer classes that are the `tokenizers` backend itself: such a folder is read by
#: PreTrainedTokenizerFast directly (the class AutoTokenizer would pick), without AutoTokenizer's
#: import of the model configuration code, which pulls in torch
FAST_BACKEND_CLASSES = {"TokenizersBackend", "PreTrainedTokenizerFast"}


def model_folder(path: str | Path) -> Path:
    folder = Path(path)
    if not folder.is_dir():
        raise ModelError(f"model folder not found: {folder}")
    if not (folder / "config.json").is_file():
        raise ModelError(f"{folder}: no config.json, so it is not a Hugging Face model folder")
    return folder


def check_tokenizer_files(folder: Path) -> None:
    """ModelError naming the folder when it has no tokenizer file at all: a model folder copied
    without its tokenizer would otherwise fail deep inside transformers with a message about the hub."""
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ModelError(f"{folder}: no tokenizer in the model folder (none of {', '.join(TOKENIZER_FILES)}); "
                         "copy the tokenizer files next to config.json")


def _tokenizer_class(folder: Path) -> str | None:
    try:
        return json.loads((folder / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return None  # no readable config: AutoTokenizer decides, and names what is wrong


def load_tokenizer_and_added(folder: Path) -> tuple[PreTrainedTokenizerBase, dict[str, list[int]]]:
    """The folder's tokenizer with every reflection token a single special id, and the tokens that
    had to be added (with the ids of their text's pieces, for initialising new embedding rows)."""
    check_tokenizer_files(folder)
    try:
        if (folder / "tokenizer.json").is_file() and _tokenizer_class(folder) in FAST_BACKEND_CLASSES:
            tokenizer = PreTrainedTokenizerFast.from_pretrained(folder, local_files_only=True)
        else:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ModelError(f"{folder}: cannot load the tokenizer: {exc}") from exc
    added = add_reflection_tokens(tokenizer)
    if added:
        logger.warning("%s: added %d reflection tokens missing from its tokenizer", folder, len(added))
    return tokenizer, added


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer of a local model folder, with every reflection token a single special id."""
    return load_tokenizer_and_added(model_folder(path))[0]
