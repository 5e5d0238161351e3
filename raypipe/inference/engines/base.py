"""The engine interface every method and the critic talk to (ARCHITECTURE.md, "Engines"), whatever runs
the model: the one place where a distribution over a set of label tokens is read from logits.

Self-RAG scores a segment with the probabilities of reflection tokens normalized over their group
(paper Eq. 3-4, App. A.4), and its critic's labels are the argmax of the same distribution (§3.2.2).
A top-k logprob list cannot give those: a group member outside the top k is not "probability 0". So
an engine reports, at every generated position whose token belongs to a reflection group, and for
the next token after a prompt (`next_token_probs`), softmax(logits[label ids]) computed from the full
logits, which equals p(token) / Σ_labels p exactly.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Literal

from transformers import PreTrainedTokenizerBase

from raypipe.errors import ModelError
from raypipe.models import group_token_ids
from raypipe.prompts import SELFRAG_PROMPT, GeneratorPrompt
from raypipe.tokens import GROUP_TOKENS, Group

logger = logging.getLogger(__name__)

FinishReason = Literal["eos", "stop", "length"]


@dataclass(frozen=True)
class GenerationParams:
    """Greedy decoding settings. Frozen (hashable), so identical calls can be memoized.

    `stop_token_ids` end a generation in addition to EOS; the stop token is kept in the output.
    `first_position_groups` are recorded at the first generated position whatever token is chosen
    there: Self-RAG reads IsRel right after `</paragraph>` even when the model writes something else.
    `return_probs=False` is plain greedy generation: no log-probabilities and no group
    probabilities are read, and `Generation.token_logprobs`/`reflections` come back empty.
    `stop_line` ends a generation at the token that ends the first line holding that text (the token
    holding the newline after it, kept; `LineStop`): Self-Reasoning stops after its `Final Answer`
    line, a row at a time, while the other rows of the batch go on.
    `frequency_penalty` is OpenAI's (and vLLM's): before the greedy choice, each token's logit is
    lowered by the penalty times the number of times the token was already generated (the prompt does
    not count). It escalates on a loop, where a constant penalty would not, and leaves copying from the
    prompt alone. Log-probabilities and group probabilities are still read from the model's own logits.
    `reuse_prefix` says that the prompts begin with a long text that later calls repeat (CRAG's few-shot
    rewriter prompt, Table 7): the HF engine keeps the KV cache of their common prefix between calls, so
    that text runs once per engine, not once per prompt or batch (vLLM caches prefixes on its own and
    ignores the flag). The tokens generated are the same with or without it.
    """

    max_new_tokens: int = 100
    stop_token_ids: tuple[int, ...] = ()
    first_position_groups: tuple[Group, ...] = ()
    return_probs: bool = True
    stop_line: str | None = None
    frequency_penalty: float = 0.0
    reuse_prefix: bool = False


@dataclass(frozen=True)
class GroupProbs:
    """The distribution of one reflection group at one generated position, normalized over the group."""

    position: int
    group: Group
    probs: dict[str, float]


@dataclass
class Generation:
    """One greedy continuation. `token_ids`/`token_logprobs` include a final EOS or stop token;
    `text` is the decoded continuation with reflection tokens and without EOS."""

    text: str
    token_ids: list[int]
    token_logprobs: list[float]
    finish_reason: FinishReason
    reflections: list[GroupProbs] = field(default_factory=list)

    @property
    def cumulative_logprob(self) -> float:
        return math.fsum(self.token_logprobs)

    def group_probs(self, group: Group, position: int | None = None) -> dict[str, float] | None:
        """The group's distribution at `position`, or at the first position where it was recorded."""
        for r in self.reflections:
            if r.group is group and (position is None or r.position == position):
                return r.probs
        return None


class Engine(ABC):
    """A greedy generator with exact reflection-group probabilities.

    Implementations: `HFEngine` (transformers) and `VLLMEngine` (vLLM), each on CPU or GPU. Both must give the
    same tokens for the same prompts, batched or one by one. `prompt` writes prompts in the format the
    model was trained with (its folder's record, `raypipe.models.prompt_format`; without one, the
    Alpaca layout of the released Self-RAG checkpoints).
    """

    tokenizer: PreTrainedTokenizerBase
    prompt: GeneratorPrompt = SELFRAG_PROMPT

    @abstractmethod
    def generate(self, prompts: list[str], params: GenerationParams) -> list[Generation]:
        """Greedy continuations of `prompts`, in order."""

    @abstractmethod
    def next_token_probs(self, prompts: list[str], tokens: tuple[str, ...]) -> list[dict[str, float]]:
        """The distribution of the token that would follow each prompt (no generation) over `tokens`
        (reflection tokens), normalized over them: the critic's judgements read it."""

    def next_group_probs(self, prompts: list[str], group: Group) -> list[dict[str, float]]:
        """The group's next-token distribution: the retrieval decision before the first segment."""
        return self.next_token_probs(prompts, GROUP_TOKENS[group])


class GroupTable:
    """Reflection-token ids of one tokenizer, indexed the ways the engines need them."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.ids: dict[Group, list[int]] = group_token_ids(tokenizer)
        self.group_of: dict[int, Group] = {i: g for g, ids in self.ids.items() for i in ids}
        self.token_of: dict[int, str] = {i: t for g, ids in self.ids.items() for i, t in zip(ids, GROUP_TOKENS[g], strict=True)}
        self.id_of: dict[str, int] = {t: i for i, t in self.token_of.items()}

    def to_read(self, token: int, position: int, params: GenerationParams) -> list[Group]:
        """The groups whose distribution is recorded where `token` was chosen at `position`."""
        groups = list(params.first_position_groups) if position == 0 else []
        own = self.group_of.get(token)
        if own is not None and own not in groups:
            groups.append(own)
        return groups

    def named(self, group: Group, probs: list[float]) -> dict[str, float]:
        """Token string -> probability, in `GROUP_TOKENS` order."""
        return dict(zip(GROUP_TOKENS[group], probs, strict=True))


def normalize_group(logprobs: list[float]) -> list[float]:
    """exp(logprobs) renormalized over the group: p_i / Σ_j p_j, computed stably."""
    top = max(logprobs)
    weights = [math.exp(lp - top) for lp in logprobs]
    total = math.fsum(weights)
    return [w / total for w in weights]


def eos_ids(tokenizer: PreTrainedTokenizerBase, generation_eos: int | list[int] | None) -> frozenset[int]:
    """Every id that ends a generation: the tokenizer's EOS and the model's generation-config EOS
    (Llama 3 style configs list several)."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    if isinstance(generation_eos, int):
        ids.add(generation_eos)
    elif generation_eos:
        ids.update(generation_eos)
    return frozenset(ids)


def fit_prompts(encoded: list[list[int]], max_positions: int | None, room: int) -> tuple[list[list[int]], int]:
    """Prompt ids left-truncated so that `room` new tokens still fit `max_positions`, and how many were
    cut. Truncation keeps the latest context (passages, the output so far) and is logged; both engines
    cut the same way, so they see the same ids."""
    if max_positions is None:
        return encoded, 0
    limit = max_positions - room
    if limit < 1:
        raise ModelError(f"max_new_tokens={room} does not fit a model of {max_positions} positions")
    long = sum(len(ids) > limit for ids in encoded)
    if long:
        logger.warning("%d of %d prompts exceed %d tokens and were left-truncated", long, len(encoded), limit)
    return [ids[-limit:] for ids in encoded], long


def decode_continuation(tokenizer: PreTrainedTokenizerBase, context_id: int | None, ids: list[int]) -> str:
    """The text `ids` add after a context ending in `context_id`.

    Decoding a continuation alone loses the leading space of SentencePiece tokenizers (Llama's "▁The"
    decodes to "The" at the start of a string), so the continuation is decoded after the context's
    last token and that token's text is cut off.
    """
    if not ids:
        return ""
    if context_id is None:
        return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    head = tokenizer.decode([context_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    both = tokenizer.decode([context_id, *ids], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return both[len(head):]


class LineStop:
    """The `GenerationParams.stop_line` rule for one sequence, fed its generated tokens one at a time:
    `feed` is true at the token whose text holds the first newline after the first occurrence of the
    label. Both engines run this one rule (the HF loop as it decodes, the vLLM engine over its outputs),
    so they stop at the same token. Each token is decoded after the one before it
    (`decode_continuation`): one two-token decode per step, whatever the length so far."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, label: str, context_id: int | None):
        self.tokenizer, self.label, self.last = tokenizer, label, context_id
        self.text = ""
        #: where the label ends in `text`, once it was seen
        self.line_from: int | None = None

    def feed(self, token: int) -> bool:
        start = len(self.text)
        self.text += decode_continuation(self.tokenizer, self.last, [token])
        self.last = token
        if self.line_from is None:
            at = self.text.find(self.label, max(0, start - len(self.label) + 1))
            if at < 0:
                return False
            self.line_from = at + len(self.label)
        return "\n" in self.text[max(self.line_from, start):]


def line_stop_length(tokenizer: PreTrainedTokenizerBase, label: str, context_id: int | None,
                     ids: list[int]) -> int | None:
    """How many of `ids` the `stop_line` rule keeps (up to and with the token that ends the label's
    line), or None when it does not fire."""
    rule = LineStop(tokenizer, label, context_id)
    return next((i + 1 for i, token in enumerate(ids) if rule.feed(token)), None)
