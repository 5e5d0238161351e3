"""The transformers engine: our own greedy loop over the model's forward with a KV cache.

`model.generate` hides the full logits behind processors and top-k friendly outputs; reading every
step's logits ourselves is what makes the group probabilities exact (softmax over the group's ids of
the raw logits) and costs one small softmax per reflection position.

Batches are left-padded with explicit position ids, so a prompt gets the same positions, and the same
tokens, alone or in a batch. Rows that finish (EOS, a stop token, the `stop_line` rule) are dropped
from the batch and the cache while the others go on.

`next_token_probs` serves the critic, whose prompts of one aspect share a long prefix (the aspect's
instruction: 70-90% of the tokens of the tiny critic's prompts): a batch runs its rows' longest
common prefix once, repeats its KV cache over the rows and runs only the suffixes (the prefix caching
vLLM does on GPU, done here per batch). Causal attention makes the prefix's keys and values the same
whether computed alone or inside each row, so results are unchanged.

`generate` with `GenerationParams.reuse_prefix` goes one step further, across calls: the engine keeps
the KV cache of the last such batch's common prefix (one row, `_Prefix`), and the next batch runs
only what its own common prefix adds to the part it shares with that one, then its suffixes. CRAG's
rewriter prompts share Table 7's few-shot text (~160 tokens of SmolLM2's, before each question), so
that text runs once per engine. One prefix is kept (a few MB for a small LM's few hundred tokens),
replaced by each batch that extends it; a model with sliding-window or recurrent layers, whose cache
cannot be cut at a position, gets the per-batch prefix only.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from raypipe.errors import ModelError
from raypipe.inference.engines.base import (
    Engine,
    FinishReason,
    Generation,
    GenerationParams,
    GroupProbs,
    GroupTable,
    LineStop,
    decode_continuation,
    eos_ids,
    fit_prompts,
)
from raypipe.models import load_model
from raypipe.models.prompt_format import generator_prompt
from raypipe.tokens import Group


@dataclass
class _Row:
    """One sequence's output while its batch decodes."""

    context_id: int | None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reflections: list[GroupProbs] = field(default_factory=list)
    finish: FinishReason | None = None


@dataclass(frozen=True)
class _Prefix:
    """A prompt prefix and its keys and values per layer (one row), kept between `reuse_prefix` calls;
    never written to: a batch's cache copies what it reuses."""

    ids: tuple[int, ...]
    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]


class HFEngine(Engine):
    """Greedy generation on a local HF folder; `batch_size` sequences per forward pass."""

    def __init__(self, model_path: str | Path, *, batch_size: int = 16, device: str | None = None,
                 dtype: torch.dtype | None = None):
        self.model, self.tokenizer = load_model(model_path, dtype=dtype, device=device)
        self.device = next(self.model.parameters()).device
        self.batch_size = batch_size
        self.prompt = generator_prompt(model_path, self.tokenizer)
        self.groups = GroupTable(self.tokenizer)
        self.eos = eos_ids(self.tokenizer, self.model.generation_config.eos_token_id)
        if self.tokenizer.pad_token_id is None:
            raise ModelError(f"{model_path}: the tokenizer has no pad token")
        self.pad_id = self.tokenizer.pad_token_id
        self.max_positions: int | None = getattr(self.model.config, "max_position_embeddings", None)
        #: prompts cut from the left to fit the model
        self.truncated = 0
        self._group_index = {g: torch.tensor(ids, device=self.device) for g, ids in self.groups.ids.items()}
        #: the forward's KV-cache keyword: `cache` in recent transformers releases, `past_key_values` before (the
        #: old name still works there but warns on every process's first call)
        self._cache_kw = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        #: the `reuse_prefix` memo, and whether this model's cache can be cut at a position to reuse one
        self._prefix: _Prefix | None = None
        layers = self._new_cache().layers  # none: a cache that makes its layers as they come, of any kind
        self._cuttable = bool(layers) and all(type(layer) is DynamicLayer for layer in layers)

    # --- prompts -----------------------------------------------------------------------------------

    def _encode(self, prompts: list[str], room: int) -> list[list[int]]:
        """Prompt ids, left-truncated so that `room` new tokens still fit the model (`fit_prompts`)."""
        fitted, cut = fit_prompts(self.tokenizer(prompts, add_special_tokens=True)["input_ids"], self.max_positions, room)
        self.truncated += cut
        return fitted

    def _padded(self, batch: list[list[int]], offset: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Left-padded ids, their mask, and position ids counted from `offset` at each first real token."""
        width = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, width - len(ids):] = torch.tensor(ids)
            mask[row, width - len(ids):] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        return input_ids, mask, offset + (mask.cumsum(-1) - 1).clamp(min=0)

    def _new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.model.config)

    def _run_suffixes(self, batch: list[list[int]], shared: int,
                      cache: DynamicCache) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run each prompt after its first `shared` tokens (already in `cache`, one row per prompt),
        left-padded; returns last-position logits, the mask over cache and suffixes, next positions."""
        input_ids, mask, positions = self._padded([ids[shared:] for ids in batch], offset=shared)
        if shared > 0:
            mask = torch.cat([mask.new_ones((len(batch), shared)), mask], dim=1)
        out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                         **{self._cache_kw: cache}, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1].float(), mask, positions[:, -1] + 1

    @staticmethod
    def _shared_length(batch: list[list[int]]) -> int:
        """The prompts' common prefix, less at least one token per prompt: the suffix run needs each
        row's last prompt token to read its next-token logits."""
        return max(0, min(len(os.path.commonprefix(batch)), min(len(ids) for ids in batch) - 1))

    def _prefix_cache(self, batch: list[list[int]], remember: bool) -> tuple[int, DynamicCache]:
        """The batch's common prefix run once, its cache repeated over the rows: (its length, the
        cache). With `remember` (`reuse_prefix`), the run starts from the part of the kept prefix it
        shares, and what it adds is kept for the next call; without it, a one-prompt batch shares
        nothing (there is no second row to save the work of)."""
        shared = self._shared_length(batch) if remember or len(batch) > 1 else 0
        if shared == 0:
            return 0, self._new_cache()
        ids = tuple(batch[0][:shared])
        kept = self._prefix if remember and self._cuttable else None
        known = len(os.path.commonprefix([kept.ids, ids])) if kept else 0
        cache = self._new_cache()
        if known:
            assert kept is not None
            for layer, (keys, values) in zip(cache.layers, kept.layers, strict=True):
                layer.update(keys[..., :known, :], values[..., :known, :])  # a copy: `update` concatenates
        if known < shared:
            self.model(input_ids=torch.tensor([ids[known:]], device=self.device),
                       position_ids=torch.arange(known, shared, device=self.device)[None],
                       **{self._cache_kw: cache}, use_cache=True, logits_to_keep=1)
            if remember and self._cuttable:
                self._prefix = _Prefix(ids, tuple((layer.keys, layer.values) for layer in cache.layers))
        cache.batch_repeat_interleave(len(batch))  # new tensors: the kept prefix is not written to
        return shared, cache

    def _prefill(self, batch: list[list[int]],
                 reuse_prefix: bool) -> tuple[torch.Tensor, DynamicCache, torch.Tensor, torch.Tensor]:
        """Run the prompts (their kept common prefix first with `reuse_prefix`); returns last-position
        logits, cache, mask and next positions."""
        shared, cache = self._prefix_cache(batch, remember=True) if reuse_prefix else (0, self._new_cache())
        logits, mask, positions = self._run_suffixes(batch, shared, cache)
        return logits, cache, mask, positions

    # --- probabilities -----------------------------------------------------------------------------

    @staticmethod
    def _label_probs(logits: torch.Tensor, index: torch.Tensor) -> list:
        """softmax(logits[..., label ids]) over the labels, in float64 so that a distribution sums to
        1 to double precision: the exact normalized distribution."""
        return torch.softmax(logits.index_select(-1, index).double(), dim=-1).tolist()

    def _group_probs(self, logits: torch.Tensor, group: Group) -> list[float]:
        return self._label_probs(logits, self._group_index[group])

    def _read_groups(self, rows: list[_Row], live: list[int], logits: torch.Tensor, next_ids: list[int],
                     step: int, params: GenerationParams) -> None:
        """Record this step's reflection distributions: rows that chose a group token, and every row
        at the first position when `first_position_groups` asks for it."""
        if step > 0 and self.groups.group_of.keys().isdisjoint(next_ids):
            return  # the common case, decided without a Python loop over the rows
        for b, i in enumerate(live):
            for group in self.groups.to_read(next_ids[b], step, params):
                probs = self._group_probs(logits[b], group)
                rows[i].reflections.append(GroupProbs(step, group, self.groups.named(group, probs)))

    # --- generation --------------------------------------------------------------------------------

    @torch.inference_mode()
    def generate(self, prompts: list[str], params: GenerationParams) -> list[Generation]:
        encoded = self._encode(prompts, params.max_new_tokens)
        out: list[Generation] = []
        for start in range(0, len(encoded), self.batch_size):
            out.extend(self._generate_batch(encoded[start:start + self.batch_size], params))
        return out

    def _generate_batch(self, batch: list[list[int]], params: GenerationParams) -> list[Generation]:
        """Greedy decoding of one batch. With `return_probs`, each step adds one fused op on the
        logits (cross-entropy of the chosen tokens = -log p, written into a [rows, steps] buffer read
        once at the end); group distributions are computed only at steps that chose a group token.
        The read-out costs a few percent of a step (benchmarks/decoding.py)."""
        stop = self.eos | frozenset(params.stop_token_ids)
        rows = [_Row(context_id=ids[-1] if ids else None) for ids in batch]
        lines = [LineStop(self.tokenizer, params.stop_line, row.context_id) for row in rows] if params.stop_line else None
        logits, cache, mask, positions = self._prefill(batch, params.reuse_prefix)
        live = list(range(len(rows)))  # row index of each batch position
        live_index = torch.arange(len(rows), device=self.device)
        nll = torch.zeros((len(rows), params.max_new_tokens), device=self.device) if params.return_probs else None
        # generated-token counts of the live rows, for the frequency penalty
        counts = logits.new_zeros(logits.shape) if params.frequency_penalty else None
        for step in range(params.max_new_tokens):
            scores = logits if counts is None else logits - params.frequency_penalty * counts
            next_tensor = scores.argmax(dim=-1)
            next_ids = next_tensor.tolist()
            if nll is not None:
                nll[live_index, step] = torch.nn.functional.cross_entropy(logits, next_tensor, reduction="none")
                self._read_groups(rows, live, logits, next_ids, step, params)
            if counts is not None:
                counts[torch.arange(len(live), device=self.device), next_tensor] += 1
            keep = []
            for b, i in enumerate(live):
                rows[i].token_ids.append(next_ids[b])
                if next_ids[b] in stop:
                    rows[i].finish = "eos" if next_ids[b] in self.eos else "stop"
                elif lines is not None and lines[i].feed(next_ids[b]):
                    rows[i].finish = "stop"
                else:
                    keep.append(b)
            if not keep or step + 1 == params.max_new_tokens:
                break
            if len(keep) < len(live):
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                mask, positions, next_tensor = mask[index], positions[index], next_tensor[index]
                live, live_index = [live[b] for b in keep], live_index[index]
                counts = counts[index] if counts is not None else None
            mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=-1)
            out = self.model(input_ids=next_tensor[:, None], attention_mask=mask, position_ids=positions[:, None],
                             **{self._cache_kw: cache}, use_cache=True)
            logits, positions = out.logits[:, -1].float(), positions + 1
        if nll is not None:
            for row, values in zip(rows, (-nll).tolist(), strict=True):
                row.logprobs = values[:len(row.token_ids)]
        return [self._finish(row) for row in rows]

    def _finish(self, row: _Row) -> Generation:
        shown = row.token_ids[:-1] if row.finish == "eos" else row.token_ids
        return Generation(text=decode_continuation(self.tokenizer, row.context_id, shown),
                          token_ids=row.token_ids, token_logprobs=row.logprobs,
                          finish_reason=row.finish or "length", reflections=row.reflections)

    def _last_logits(self, batch: list[list[int]]) -> torch.Tensor:
        """Logits at each row's last prompt token: the shared prefix once, then the padded suffixes."""
        shared, cache = self._prefix_cache(batch, remember=False)
        return self._run_suffixes(batch, shared, cache)[0]

    @torch.inference_mode()
    def next_token_probs(self, prompts: list[str], tokens: tuple[str, ...]) -> list[dict[str, float]]:
        """Batches are formed in length order (the padded suffixes then waste little); results come
        back in input order."""
        encoded = self._encode(prompts, 1)
        index = torch.tensor([self.groups.id_of[t] for t in tokens], device=self.device)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        out: list[dict[str, float]] = [{}] * len(encoded)
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            probs_of_rows = self._label_probs(self._last_logits([encoded[i] for i in rows]), index)
            for i, probs in zip(rows, probs_of_rows, strict=True):
                out[i] = dict(zip(tokens, probs, strict=True))
        return out
