"""The tiny Llama-architecture base model the demo trains its critic and generator from.

No weights can be downloaded here, so the project builds its own base model (ARCHITECTURE.md §4): a byte-level
BPE tokenizer trained on the world's texts, and a randomly initialised `LlamaForCausalLM` of a few
million parameters, saved as an ordinary HF folder that `load_model` treats like any real checkpoint.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from raypipe.errors import ConfigError, DataError
from raypipe.models.tokenizer import train_tokenizer
from raypipe.prompts import format_generator_prompt
from raypipe.settings.models import TinyModelConfig
from raypipe.tokens import passage_text

logger = logging.getLogger(__name__)

_READ_BATCH_ROWS = 1024


def _parquet_files(folder: Path) -> list[Path]:
    files = sorted(folder.glob("*.parquet"))
    if not files:
        raise DataError("no parquet files in the world folder", file=str(folder))
    return files


def _column_batches(files: list[Path], columns: list[str]) -> Iterator[dict[str, list]]:
    for file in files:
        parquet = pq.ParquetFile(file)
        absent = [c for c in columns if c not in parquet.schema_arrow.names]
        if absent:
            raise DataError("column missing", file=str(file), field=absent[0])
        for batch in parquet.iter_batches(batch_size=_READ_BATCH_ROWS, columns=columns):
            yield batch.to_pydict()


def _instance_texts(files: list[Path]) -> Iterator[str]:
    # The whole generator prompt plus the output: the "### Instruction:" markers then occur once per
    # instance, often enough for BPE to merge them into a few ids, so every prompt costs fewer positions.
    for batch in _column_batches(files, ["instruction", "input", "output"]):
        for row in zip(batch["instruction"], batch["input"], batch["output"], strict=True):
            instruction, input_, output = row
            yield format_generator_prompt(instruction, input_) + output


def _passage_texts(files: list[Path]) -> Iterator[str]:
    for batch in _column_batches(files, ["title", "text"]):
        for title, text in zip(batch["title"], batch["text"], strict=True):
            yield passage_text(title, text)  # the shape the models read passages in


def _interleave(*streams: Iterator[str]) -> Iterator[str]:
    """Round robin, so that a `limit` still samples both instances and passages."""
    for group in itertools.zip_longest(*streams):
        yield from (text for text in group if text is not None)


def world_texts(world_dir: str | Path, limit: int | None = None) -> Iterator[str]:
    """Texts to train the tokenizer on, in a deterministic order: each instance as its generator prompt
    plus output, interleaved with passages (`title\\ntext`), at most `limit` of them.

    The folders are checked now, so a wrong path fails at the call rather than mid-training.
    """
    world_dir = Path(world_dir)
    instances = _parquet_files(world_dir / "instances")
    passages = _parquet_files(world_dir / "passages")
    return itertools.islice(_interleave(_instance_texts(instances), _passage_texts(passages)), limit)


def _llama_config(cfg: TinyModelConfig, vocab_size: int, bos: int, eos: int, pad: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_attention_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=pad,
    )


def build_tiny_model(cfg: TinyModelConfig, texts: Iterable[str], out_dir: str | Path) -> Path:
    """Train the tokenizer on (at most `cfg.tokenizer_train_texts` of) `texts`, build a seeded tiny
    Llama sized by `cfg`, and save both, with a generation config, to `out_dir`."""
    if cfg.hidden_size % cfg.num_attention_heads:  # fail before training the tokenizer
        raise ConfigError(
            f"tiny_model.hidden_size ({cfg.hidden_size}) must be a multiple of "
            f"tiny_model.num_attention_heads ({cfg.num_attention_heads})"
        )
    out = Path(out_dir)
    tokenizer = train_tokenizer(itertools.islice(texts, cfg.tokenizer_train_texts), cfg.vocab_size)
    tokenizer.model_max_length = cfg.max_position_embeddings
    ids = (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)
    config = _llama_config(cfg, len(tokenizer), *ids)
    with torch.random.fork_rng(devices=[]):  # same config, same weights; the caller's RNG untouched
        torch.manual_seed(cfg.seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=ids[0], eos_token_id=ids[1], pad_token_id=ids[2])
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    logger.info("tiny model: %d parameters, vocab %d -> %s", model.num_parameters(), len(tokenizer), out)
    return out
