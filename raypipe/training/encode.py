"""Tokenization with loss masks: prompt + target -> input ids and labels (-100 where masked).

The full text is tokenized in one pass, exactly as the decoder will see it at inference time, and the
character offsets of each token decide its label: a token that touches a masked span (see
:mod:`raypipe.training.spans`) gets -100. EOS is always appended to the target (the model must learn
to stop) and inherits the mask of the target's last character. Tokens after the last loss token are
dropped: in a causal LM they change no logit the loss reads, so they would only cost compute (a
Self-Reasoning stage that trains on the relevance process alone sees the prompt and that process, not
the whole trajectory). Truncation then keeps the head of the sequence and moves the cut back rather
than split a reflection token that spans several ids (a tokenizer without the reflection tokens as
special tokens); every truncated example is counted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from raypipe.errors import DataError
from raypipe.prompts import SELFRAG_PROMPT, GeneratorPrompt
from raypipe.tokens import REFLECTION_TOKENS, SPECIAL_TOKENS, ReflectionFormatError, parse
from raypipe.training.spans import Span, SpanFormatError, find_spans

IGNORE_INDEX = -100
_SPECIAL_RE = re.compile("|".join(re.escape(t) for t in sorted(SPECIAL_TOKENS, key=len, reverse=True)))


@dataclass
class EncodedExample:
    input_ids: list[int]
    labels: list[int]
    truncated: bool

    @property
    def n_loss_tokens(self) -> int:
        return sum(label != IGNORE_INDEX for label in self.labels)


def row_prompt_target(row: Mapping[str, Any], file: str | None = None,
                      prompt_format: GeneratorPrompt = SELFRAG_PROMPT) -> tuple[str, str]:
    """The (prompt, target) of a row: a D_critic row carries its prompt (prompt/target); a D_gen row
    (instruction/input/output, Self-RAG's released generator data included), a released critic row
    (instruction/input/output, the output one reflection token) or a Self-Reasoning row
    (instruction/input/target) is written in `prompt_format`. DataError (row id, field, file) for a
    missing field or a malformed augmented output."""
    row_id = str(row.get("id")) if row.get("id") is not None else None
    target_field = "target" if "target" in row else "output"
    if "prompt" in row and "target" in row:
        prompt, target = row.get("prompt"), row.get("target")
        if not isinstance(prompt, str):
            raise DataError("prompt must be a string", file=file, row_id=row_id, field="prompt")
    elif "instruction" in row and target_field in row:
        instruction, target = row.get("instruction"), row.get(target_field)
        if not isinstance(instruction, str) or not instruction.strip():
            raise DataError("instruction is missing or empty", file=file, row_id=row_id, field="instruction")
        prompt = prompt_format(instruction, row.get("input") or "")
        # a lone reflection token is a critic judgement (Self-RAG's released critic data carries them as
        # instruction/input/output rows); anything else is an augmented output
        if target_field == "output" and isinstance(target, str) and target.strip() not in REFLECTION_TOKENS:
            try:  # an augmented output must be well formed whatever the stage masks (tokens.parse rules)
                parse(target)
            except ReflectionFormatError as exc:
                raise DataError(str(exc), file=file, row_id=row_id, field="output") from None
    else:
        raise DataError("a training row needs prompt/target, instruction/input/output or "
                        "instruction/input/target columns", file=file, row_id=row_id)
    if not isinstance(target, str) or not target.strip():
        raise DataError(f"{target_field} is missing or empty", file=file, row_id=row_id, field=target_field)
    return prompt, target


def _masked_prefix_sum(spans: list[Span], n_chars: int) -> np.ndarray:
    """prefix[i] = number of masked characters before offset i, so a token [a, b) touches a masked
    span iff prefix[b] > prefix[a]."""
    masked = np.zeros(n_chars, dtype=np.int32)
    for start, end in spans:
        masked[start:end] = 1
    return np.concatenate([[0], np.cumsum(masked)])


def _safe_cut(offsets: list[tuple[int, int]], cut: int, text: str) -> int:
    """Largest k <= cut such that keeping tokens[:k] splits no reflection token's characters."""
    protected = [m.span() for m in _SPECIAL_RE.finditer(text)]
    while 0 < cut < len(offsets):
        kept_end, dropped_start = offsets[cut - 1][1], offsets[cut][0]
        split = next((s for s, e in protected if s < kept_end and dropped_start < e), None)
        if split is None:
            return cut
        cut = next(i for i, (_, end) in enumerate(offsets) if end > split)
    return cut


def encode_example(prompt: str, target: str, tokenizer: Any, mask: list[str], max_length: int) -> EncodedExample:
    """Input ids and labels for one example; `mask` names the span kinds excluded from the loss.

    Raises SpanFormatError on malformed markup (the caller adds the row id and file).
    """
    text = prompt + target
    prefix = _masked_prefix_sum(find_spans(mask, prompt, target), len(text))
    enc = tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
    ids: list[int] = list(enc["input_ids"])
    offsets: list[tuple[int, int]] = [tuple(o) for o in enc["offset_mapping"]]
    # tokens the tokenizer adds itself (BOS) have empty offsets and are never predicted
    labels = [
        IGNORE_INDEX if a == b or prefix[b] > prefix[a] else tok for tok, (a, b) in zip(ids, offsets, strict=True)
    ]
    eos_masked = prefix[len(text)] > prefix[len(text) - 1]
    ids.append(tokenizer.eos_token_id)
    labels.append(IGNORE_INDEX if eos_masked else tokenizer.eos_token_id)
    last_loss = max((i for i, label in enumerate(labels) if label != IGNORE_INDEX), default=len(labels) - 1)
    ids, labels = ids[: last_loss + 1], labels[: last_loss + 1]
    if len(ids) <= max_length:
        return EncodedExample(ids, labels, truncated=False)
    cut = _safe_cut(offsets, max_length, text)
    return EncodedExample(ids[:cut], labels[:cut], truncated=True)


def encode_row(row: Mapping[str, Any], tokenizer: Any, mask: list[str], max_length: int,
               file: str | None = None, prompt_format: GeneratorPrompt = SELFRAG_PROMPT) -> EncodedExample:
    """Encode a row of any shape; a malformed row raises DataError naming its id, field and file."""
    file = row.get("path") or file
    prompt, target = row_prompt_target(row, file=file, prompt_format=prompt_format)
    try:
        return encode_example(prompt, target, tokenizer, mask, max_length)
    except SpanFormatError as exc:
        field = "target" if "target" in row else "output"
        raise DataError(str(exc), file=file, row_id=str(row.get("id")), field=field) from None
