"""The vLLM engine (GPU): the same interface and the same exact group normalization as `HFEngine`.

Imported only through `make_engine` on a CUDA machine, since vLLM ships CUDA-only wheels (no CPU wheel
on PyPI) and pins its own torch.

Two passes, because a top-k logprob list per generated token cannot give exact group probabilities
and asking for the whole vocabulary at every position (what the released Self-RAG scripts did with
`logprobs=32016`) costs a vocabulary-sized dict per token:
1. greedy generation with the chosen token's log-prob only (`logprobs=0`);
2. for the few positions that need a group distribution (a reflection token was chosen there, or a
   `first_position_groups` read-out), one single-token request on the prefix up to that position
   with `logprobs=-1` (allowed by `max_logprobs=-1`). vLLM's default `logprobs_mode`, raw_logprobs,
   computes these from the raw logits, so restricting them to the group's ids and renormalizing is
   exactly softmax(logits[group]). The prefixes repeat pass 1's sequences, so prefix caching turns
   each request into one decode step.
Prompts are tokenized with our tokenizer and passed as token ids, so both engines see the same ids.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

from transformers import AutoConfig, GenerationConfig
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt

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
    line_stop_length,
    normalize_group,
)
from raypipe.models import load_tokenizer
from raypipe.models.prompt_format import generator_prompt
from raypipe.tokens import GROUP_TOKENS, Group

logger = logging.getLogger(__name__)

#: one greedy sequence: its token ids, their log-probs, and why it ended
Row = tuple[list[int], list[float], FinishReason]
_NEXT_TOKEN = SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1, detokenize=False)


class VLLMEngine(Engine):
    def __init__(self, model_path: str | Path, *, gpu_memory_utilization: float = 0.85, **llm_kwargs):
        self.tokenizer = load_tokenizer(model_path)
        vocab = AutoConfig.from_pretrained(model_path, local_files_only=True).vocab_size
        if len(self.tokenizer) > vocab:
            # load_tokenizer added reflection tokens the weights have no rows for; vLLM cannot resize.
            raise ModelError(f"{model_path}: the tokenizer lacks reflection tokens; the vLLM engine needs a "
                             "Self-RAG checkpoint (fine-tune it first, or use engine.kind=hf)")
        self.prompt = generator_prompt(model_path, self.tokenizer)
        self.groups = GroupTable(self.tokenizer)
        try:
            generation_eos = GenerationConfig.from_pretrained(model_path, local_files_only=True).eos_token_id
        except OSError:
            generation_eos = None
        self.eos = eos_ids(self.tokenizer, generation_eos)
        self.llm = LLM(model=str(model_path), tokenizer=str(model_path), max_logprobs=-1,
                       enable_prefix_caching=True, gpu_memory_utilization=gpu_memory_utilization, **llm_kwargs)

    def _prompt_ids(self, prompts: list[str]) -> list[list[int]]:
        return [list(ids) for ids in self.tokenizer(prompts, add_special_tokens=True)["input_ids"]]

    def _next_logprobs(self, prefixes: list[list[int]]) -> list[dict[int, float]]:
        """The full next-token log-prob distribution after each prefix."""
        if not prefixes:
            return []
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prefixes], _NEXT_TOKEN,
                                    use_tqdm=False)
        return [{tid: lp.logprob for tid, lp in out.outputs[0].logprobs[0].items()} for out in outputs]

    def _group(self, logprobs: dict[int, float], group: Group) -> dict[str, float]:
        return self._labels(logprobs, GROUP_TOKENS[group])

    def _labels(self, logprobs: dict[int, float], tokens: tuple[str, ...]) -> dict[str, float]:
        ids = [self.groups.id_of[t] for t in tokens]
        missing = [i for i in ids if i not in logprobs]
        if missing:  # never approximate from a truncated list: that is the one thing this must not do
            raise ModelError(f"vLLM returned logprobs for {len(logprobs)} tokens, without the label ids {missing}; "
                             "this vLLM version does not honour logprobs=-1")
        return dict(zip(tokens, normalize_group([logprobs[i] for i in ids]), strict=True))

    def next_token_probs(self, prompts: list[str], tokens: tuple[str, ...]) -> list[dict[str, float]]:
        return [self._labels(lp, tokens) for lp in self._next_logprobs(self._prompt_ids(prompts))]

    def generate(self, prompts: list[str], params: GenerationParams) -> list[Generation]:
        prompt_ids = self._prompt_ids(prompts)
        rows = self._sample(prompt_ids, params, params.max_new_tokens, [params.stop_line] if params.stop_line else None)
        if params.stop_line:
            rows = self._finish_lines(prompt_ids, rows, params, params.stop_line)
        reads = self._reads(rows, params)
        distributions = iter(self._next_logprobs([prompt_ids[r] + rows[r][0][:pos] for r, pos, _ in reads]))
        reflections: list[list[GroupProbs]] = [[] for _ in rows]
        for r, pos, groups in reads:
            logprobs = next(distributions)
            ids, token_logprobs, _ = rows[r]
            if len(token_logprobs) == pos:  # the re-appended stop token: its log-prob comes from pass 2
                token_logprobs.append(logprobs[ids[pos]])
            reflections[r].extend(GroupProbs(pos, g, self._group(logprobs, g)) for g in groups)
        return [
            Generation(text=decode_continuation(self.tokenizer, prompt_ids[r][-1] if prompt_ids[r] else None,
                                                ids[:-1] if finish == "eos" else ids),
                       token_ids=ids, token_logprobs=logprobs, finish_reason=finish, reflections=reflections[r])
            for r, (ids, logprobs, finish) in enumerate(rows)
        ]

    def _sample(self, prompt_ids: list[list[int]], params: GenerationParams, max_tokens: list[int] | int,
                stop: list[str] | None, penalties: list[dict[int, float]] | None = None) -> list[Row]:
        """One greedy pass per prompt: (ids, log-probs, finish). `stop` strings end a sequence after the
        token that completes one (kept); `penalties` (a logit bias per prompt) carry the frequency
        penalty of tokens generated in an earlier pass, which vLLM counts as prompt."""
        def sampling(r: int) -> SamplingParams:
            return SamplingParams(max_tokens=max_tokens if isinstance(max_tokens, int) else max_tokens[r],
                                  temperature=0.0, stop_token_ids=list(params.stop_token_ids),
                                  frequency_penalty=params.frequency_penalty,
                                  logit_bias=penalties[r] if penalties and penalties[r] else None,
                                  stop=stop, include_stop_str_in_output=True, skip_special_tokens=False,
                                  detokenize=stop is not None, logprobs=0 if params.return_probs else None)

        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompt_ids],
                                    [sampling(r) for r in range(len(prompt_ids))], use_tqdm=False)
        rows = []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            logprobs = [completion.logprobs[i][t].logprob for i, t in enumerate(ids)] if params.return_probs else []
            if isinstance(completion.stop_reason, int) and (not ids or ids[-1] != completion.stop_reason):
                ids.append(completion.stop_reason)  # a version that strips stop tokens: put it back
            rows.append((ids, logprobs, self._finish_reason(completion.finish_reason, ids)))
        return rows

    def _finish_lines(self, prompt_ids: list[list[int]], rows: list[Row], params: GenerationParams,
                      label: str) -> list[Row]:
        """The `stop_line` rule on vLLM, whose stop strings cannot say "the newline after the label":
        the first pass stopped at the label; the rows that reached it and have room left go on with
        the newline as their stop string, their first pass as prompt and its tokens' frequency penalty
        as a logit bias (so the counts go on as in one pass). Each row is then cut where `LineStop`
        fires, the rule the HF engine runs as it decodes."""
        context = [p[-1] if p else None for p in prompt_ids]
        pending = []
        for r, (ids, _, finish) in enumerate(rows):
            rule = LineStop(self.tokenizer, label, context[r])
            ended = any(rule.feed(token) for token in ids)
            stopped_at_label = finish == "stop" and ids[-1] not in params.stop_token_ids
            if not ended and rule.line_from is not None and stopped_at_label and len(ids) < params.max_new_tokens:
                pending.append(r)
        if pending:
            penalties = [{t: -params.frequency_penalty * n for t, n in Counter(rows[r][0]).items()}
                         if params.frequency_penalty else {} for r in pending]
            more = self._sample([prompt_ids[r] + rows[r][0] for r in pending], params,
                                [params.max_new_tokens - len(rows[r][0]) for r in pending], ["\n"], penalties)
            for r, (ids, logprobs, finish) in zip(pending, more, strict=True):
                head_ids, head_logprobs, _ = rows[r]
                rows[r] = (head_ids + ids, head_logprobs + logprobs, finish)
        out = []
        for r, (ids, logprobs, finish) in enumerate(rows):
            keep = line_stop_length(self.tokenizer, label, context[r], ids)
            out.append((ids[:keep], logprobs[:keep], "stop") if keep is not None else (ids, logprobs, finish))
        return out

    def _finish_reason(self, vllm_reason: str | None, ids: list[int]) -> FinishReason:
        if vllm_reason == "length":
            return "length"
        return "eos" if ids and ids[-1] in self.eos else "stop"

    def _reads(self, rows: list[Row],
               params: GenerationParams) -> list[tuple[int, int, list[Group]]]:
        """(row, position, groups) of every next-token distribution the generations need: where a group
        is read, and where a re-appended stop token still lacks its log-prob."""
        if not params.return_probs:
            return []
        reads = []
        for r, (ids, logprobs, _) in enumerate(rows):
            for pos, token in enumerate(ids):
                groups = self.groups.to_read(token, pos, params)
                if groups or pos >= len(logprobs):
                    reads.append((r, pos, groups))
        return reads
