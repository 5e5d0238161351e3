"""The vLLM engine (its CPU build or the official GPU wheel): the same interface and the same exact group
normalization as `HFEngine`.

Imported only through `make_engine`, which picks it wherever vllm imports. A group distribution is
softmax(logits[group ids]), which a top-k logprob list cannot give (a group member outside the top k is
not "probability 0"), so every read asks for the log-probs of exactly the reflection-token ids:
- **one pass** where the installed vLLM has `SamplingParams.logprob_token_ids`: greedy generation
  returns, at every generated position, the chosen token's log-prob and those of every reflection id;
  the group read-outs cost no extra request, and `next_token_probs` is one one-token request;
- **two passes** on a vLLM without it: greedy generation with the chosen token's log-prob only, then,
  for the few positions that need a distribution, a one-token request on the prefix up to there with
  `logprobs=-1` (the whole vocabulary; prefix caching makes each one decode step).
Either way vLLM's default `logprobs_mode` (raw_logprobs) computes log-probs from the raw logits, before
the frequency penalty or a logit bias, so restricting them to a group's ids and renormalizing is
exactly softmax(logits[group]) (Self-RAG App. A.4), as the HF loop reads it.

Prompts are tokenized with our tokenizer and passed as token ids, so both engines see the same ids.
By default the engine core runs in the calling process (`EngineConfig.in_process`,
`VLLM_ENABLE_V1_MULTIPROCESSING=0`): an eval actor or a serving replica then holds its model itself, Ray
accounts its memory, and nothing outlives it when it is killed. It also takes that process's
torch.distributed default group and its torch thread setting, so a process that trains as well (the
test session) runs it in a child process instead. Threads and KV cache come from `EngineConfig`
(`cpu_threads`, `cpu_kv_cache_gib`).
"""

from __future__ import annotations

import inspect
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
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
    fit_prompts,
    line_stop_length,
    normalize_group,
)
from raypipe.models import load_tokenizer
from raypipe.models.prompt_format import generator_prompt
from raypipe.settings.models import EngineConfig
from raypipe.tokens import GROUP_TOKENS

#: one greedy sequence: its token ids, their log-probs, why it ended, and (one pass) the log-probs vLLM
#: returned at each position, reflection ids included
Row = tuple[list[int], list[float], FinishReason, list[dict[int, float]]]

#: whether this vLLM reads listed ids' log-probs in the generation pass (`logprob_token_ids`)
READS_LISTED_IDS = "logprob_token_ids" in inspect.signature(SamplingParams).parameters


def _cpu_environment(cfg: EngineConfig) -> dict[str, str]:
    """vLLM's CPU settings, as the environment variables it reads when an engine starts (`_environment`
    sets them for the start only).

    vLLM drops torch to one thread unless `OMP_NUM_THREADS` is set: it is set to `cfg.cpu_threads`, or
    to the threads the process has, and an engine in this process gets that many torch threads. A child
    engine core is not pinned to cores (`VLLM_CPU_OMP_THREADS_BIND=nobind`): fixed core lists would
    collide between the engines of a node."""
    threads = cfg.cpu_threads or torch.get_num_threads()
    if cfg.in_process:
        torch.set_num_threads(threads)
    return {"OMP_NUM_THREADS": str(threads), "VLLM_ENABLE_V1_MULTIPROCESSING": "0" if cfg.in_process else "1",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_KVCACHE_SPACE": str(cfg.cpu_kv_cache_gib)}


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """`values` in this process's environment while an engine starts, the old ones back after it: left
    set, they would reach every process started from here later (a local Ray instance's workers
    inherit the driver's environment: one torch thread in a 2-CPU training worker). vLLM caches the
    variables after the first engine of a process: the cache is cleared so that this engine's hold."""
    from vllm import envs

    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    if hasattr(envs, "disable_envs_cache"):
        envs.disable_envs_cache()
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class VLLMEngine(Engine):
    def __init__(self, model_path: str | Path, cfg: EngineConfig | None = None, *,
                 dtype: torch.dtype = torch.float32, **llm_kwargs):
        cfg = cfg or EngineConfig(kind="vllm")
        self.tokenizer = load_tokenizer(model_path)
        config = AutoConfig.from_pretrained(model_path, local_files_only=True)
        if len(self.tokenizer) > config.vocab_size:
            # load_tokenizer added reflection tokens the weights have no rows for; vLLM cannot resize.
            raise ModelError(f"{model_path}: the tokenizer lacks reflection tokens; the vLLM engine needs a "
                             "Self-RAG checkpoint (fine-tune it first, or use engine.kind=hf)")
        self.prompt = generator_prompt(model_path, self.tokenizer)
        self.groups = GroupTable(self.tokenizer)
        #: every reflection id: what one pass reads at each generated position
        self.read_ids = sorted(self.groups.group_of)
        try:
            generation_eos = GenerationConfig.from_pretrained(model_path, local_files_only=True).eos_token_id
        except OSError:
            generation_eos = None
        self.eos = eos_ids(self.tokenizer, generation_eos)
        model_positions = getattr(config, "max_position_embeddings", None)
        self.max_positions = min(p for p in (cfg.max_model_len, model_positions) if p) if (
            cfg.max_model_len or model_positions) else None
        #: prompts cut from the left to fit `max_positions`
        self.truncated = 0
        environment: dict[str, str] = {}
        if torch.cuda.is_available():
            llm_kwargs.setdefault("gpu_memory_utilization", cfg.gpu_memory_utilization)
        else:
            environment = _cpu_environment(cfg)
        if cfg.kv_block_size:
            llm_kwargs.setdefault("block_size", cfg.kv_block_size)
        #: prefix caching keeps whole blocks: a shared prefix shorter than one is not reused
        self.block_size = llm_kwargs.get("block_size") or (16 if torch.cuda.is_available() else 128)
        # one pass reads len(read_ids) listed ids plus the chosen one; two passes read the whole vocabulary
        max_logprobs = len(self.read_ids) + 1 if READS_LISTED_IDS else -1
        with _environment(environment):
            self.llm = LLM(model=str(model_path), tokenizer=str(model_path), dtype=dtype, max_logprobs=max_logprobs,
                           max_model_len=self.max_positions, enable_prefix_caching=True,
                           enforce_eager=cfg.enforce_eager, seed=0, **llm_kwargs)

    def close(self) -> None:
        """Stop the engine core (its child process, when not in process) now rather than at exit."""
        self.llm.llm_engine.engine_core.shutdown()

    def _prompt_ids(self, prompts: list[str], room: int) -> list[list[int]]:
        encoded = [list(ids) for ids in self.tokenizer(prompts, add_special_tokens=True)["input_ids"]]
        fitted, cut = fit_prompts(encoded, self.max_positions, room)
        self.truncated += cut
        return fitted

    def _next_logprobs(self, prefixes: list[list[int]], ids: list[int], warm: bool = True) -> list[dict[int, float]]:
        """The next-token log-probs after each prefix, of `ids` at least (the whole vocabulary on a vLLM
        that cannot list ids)."""
        if not prefixes:
            return []
        if warm and len(prefixes) > 1 and len(os.path.commonprefix(prefixes)) >= self.block_size:
            # prompts that share a long prefix (a critic aspect's instruction): one goes first, so the
            # rest find that prefix's blocks in the cache instead of each computing it in one batch
            return self._next_logprobs(prefixes[:1], ids, False) + self._next_logprobs(prefixes[1:], ids, False)
        params = (SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=sorted(set(ids)), detokenize=False)
                  if READS_LISTED_IDS else
                  SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1, detokenize=False))
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prefixes], params, use_tqdm=False)
        return [{tid: lp.logprob for tid, lp in out.outputs[0].logprobs[0].items()} for out in outputs]

    def _labels(self, logprobs: dict[int, float], tokens: tuple[str, ...]) -> dict[str, float]:
        ids = [self.groups.id_of[t] for t in tokens]
        missing = [i for i in ids if i not in logprobs]
        if missing:  # never approximate from a truncated list: that is the one thing this must not do
            raise ModelError(f"vLLM returned logprobs for {len(logprobs)} tokens, without the label ids {missing}; "
                             "this vLLM version honours neither logprob_token_ids nor logprobs=-1")
        return dict(zip(tokens, normalize_group([logprobs[i] for i in ids]), strict=True))

    def next_token_probs(self, prompts: list[str], tokens: tuple[str, ...]) -> list[dict[str, float]]:
        ids = [self.groups.id_of[t] for t in tokens]
        return [self._labels(lp, tokens) for lp in self._next_logprobs(self._prompt_ids(prompts, 1), ids)]

    def generate(self, prompts: list[str], params: GenerationParams) -> list[Generation]:
        prompt_ids = self._prompt_ids(prompts, params.max_new_tokens)
        rows = self._sample(prompt_ids, params, params.max_new_tokens, [params.stop_line] if params.stop_line else None)
        if params.stop_line:
            rows = self._finish_lines(prompt_ids, rows, params, params.stop_line)
        reflections = self._reflections(prompt_ids, rows, params)
        return [
            Generation(text=decode_continuation(self.tokenizer, prompt_ids[r][-1] if prompt_ids[r] else None,
                                                ids[:-1] if finish == "eos" else ids),
                       token_ids=ids, token_logprobs=logprobs, finish_reason=finish, reflections=reflections[r])
            for r, (ids, logprobs, finish, _) in enumerate(rows)
        ]

    def _reflections(self, prompt_ids: list[list[int]], rows: list[Row],
                     params: GenerationParams) -> list[list[GroupProbs]]:
        """Each row's group distributions, from the log-probs its pass returned at each position; a
        position without them (every position on a two-pass vLLM, a re-appended stop token) is read by
        one one-token request on its prefix. A re-appended stop token gets its log-prob there too."""
        if not params.return_probs:
            return [[] for _ in rows]
        reads = [(r, pos, groups) for r, (ids, logprobs, _, returned) in enumerate(rows)
                 for pos, token in enumerate(ids)
                 for groups in [self.groups.to_read(token, pos, params)]
                 if (groups and pos >= len(returned)) or pos >= len(logprobs)]
        fetched = iter(self._next_logprobs([prompt_ids[r] + rows[r][0][:pos] for r, pos, _ in reads],
                                           [*self.read_ids, *{rows[r][0][pos] for r, pos, _ in reads}]))
        looked_up = {(r, pos): next(fetched) for r, pos, _ in reads}
        out: list[list[GroupProbs]] = []
        for r, (ids, token_logprobs, _, returned) in enumerate(rows):
            found = []
            for pos, token in enumerate(ids):
                logprobs = returned[pos] if pos < len(returned) else looked_up.get((r, pos))
                if pos >= len(token_logprobs):  # the re-appended stop token
                    token_logprobs.append(looked_up[(r, pos)][token])
                found.extend(GroupProbs(pos, g, self._labels(logprobs, GROUP_TOKENS[g]))
                             for g in self.groups.to_read(token, pos, params))
            out.append(found)
        return out

    def _sample(self, prompt_ids: list[list[int]], params: GenerationParams, max_tokens: list[int] | int,
                stop: list[str] | None, penalties: list[dict[int, float]] | None = None) -> list[Row]:
        """One greedy pass per prompt. `stop` strings end a sequence after the token that completes one
        (kept); `penalties` (a logit bias per prompt) carry the frequency penalty of tokens generated in
        an earlier pass, which vLLM counts as prompt."""
        one_pass = params.return_probs and READS_LISTED_IDS

        def sampling(r: int) -> SamplingParams:
            reads = ({"logprob_token_ids": self.read_ids} if one_pass else
                     {"logprobs": 0 if params.return_probs else None})
            return SamplingParams(max_tokens=max_tokens if isinstance(max_tokens, int) else max_tokens[r],
                                  temperature=0.0, stop_token_ids=list(params.stop_token_ids),
                                  frequency_penalty=params.frequency_penalty,
                                  logit_bias=penalties[r] if penalties and penalties[r] else None,
                                  stop=stop, include_stop_str_in_output=True, skip_special_tokens=False,
                                  detokenize=stop is not None, **reads)

        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompt_ids],
                                    [sampling(r) for r in range(len(prompt_ids))], use_tqdm=False)
        rows = []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            returned = ([{t: lp.logprob for t, lp in position.items()} for position in completion.logprobs]
                        if params.return_probs else [])
            logprobs = [returned[i][t] for i, t in enumerate(ids)] if params.return_probs else []
            if isinstance(completion.stop_reason, int) and (not ids or ids[-1] != completion.stop_reason):
                ids.append(completion.stop_reason)  # a version that strips stop tokens: put it back
            rows.append((ids, logprobs, self._finish_reason(completion.finish_reason, ids),
                         returned if one_pass else []))
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
        for r, (ids, _, finish, _) in enumerate(rows):
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
            for r, (ids, logprobs, finish, returned) in zip(pending, more, strict=True):
                head_ids, head_logprobs, _, head_returned = rows[r]
                rows[r] = (head_ids + ids, head_logprobs + logprobs, finish, head_returned + returned)
        out = []
        for r, (ids, logprobs, finish, returned) in enumerate(rows):
            keep = line_stop_length(self.tokenizer, label, context[r], ids)
            out.append((ids[:keep], logprobs[:keep], "stop", returned[:keep]) if keep is not None
                       else (ids, logprobs, finish, returned))
        return out

    def _finish_reason(self, vllm_reason: str | None, ids: list[int]) -> FinishReason:
        if vllm_reason == "length":
            return "length"
        return "eos" if ids and ids[-1] in self.eos else "stop"
