"""Which prompt format a model folder was trained with (`raypipe.prompts.GeneratorPrompt`).

Training records it in the exported folder (`prompt_format.json`), so eval and serving write the
prompts that model learned; a folder without the record is read in the Alpaca layout of the released
Self-RAG checkpoints. `training.*.prompt_format: auto` keeps a base model's recorded format, else uses
its chat template when it has one (an instruct model), else the Alpaca layout (the tiny model, Llama-2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

from raypipe.disk import write_text
from raypipe.errors import ConfigError, ModelError
from raypipe.prompts import GeneratorPrompt, PromptFormatName

FILE = "prompt_format.json"
NAMES: tuple[str, ...] = get_args(PromptFormatName)


def recorded_format(model_dir: str | Path) -> PromptFormatName | None:
    """The format a folder records, or None when it records none."""
    path = Path(model_dir) / FILE
    if not path.is_file():
        return None
    try:
        name = json.loads(path.read_text())["format"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ModelError(f"{path}: expected {{\"format\": one of {list(NAMES)}}}: {exc}") from None
    if name not in NAMES:
        raise ModelError(f"{path}: unknown prompt format {name!r}; known: {list(NAMES)}")
    return name


def record_format(model_dir: str | Path, name: PromptFormatName) -> None:
    write_text(Path(model_dir) / FILE, json.dumps({"format": name}) + "\n")


def resolve_format(setting: str, base_dir: str | Path, tokenizer: Any) -> PromptFormatName:
    """The format a training run uses: `setting` unless `auto`; `auto` keeps the base folder's record,
    else picks `chat` when the base tokenizer has a chat template, else `selfrag`."""
    if setting != "auto":
        if setting == "chat" and not getattr(tokenizer, "chat_template", None):
            raise ConfigError(f"prompt_format: chat, but the tokenizer of {base_dir} has no chat template")
        return setting  # type: ignore[return-value]
    recorded = recorded_format(base_dir)
    if recorded is not None:
        return recorded
    return "chat" if getattr(tokenizer, "chat_template", None) else "selfrag"


def generator_prompt(model_dir: str | Path, tokenizer: Any) -> GeneratorPrompt:
    """The prompt format of a model folder, ready to render prompts with its tokenizer."""
    return GeneratorPrompt(recorded_format(model_dir) or "selfrag", tokenizer)
