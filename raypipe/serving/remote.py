"""The engine and searcher a Decoder replica's methods run with: proxies of the Generator and Retrieval
deployments, so every decode in the app shares one model and one index (and their batches).

Methods are synchronous, so these proxies block on `DeploymentResponse.result()`; the Decoder runs
each decode in a worker thread, never on the replica's event loop. Each proxy is made per request and
clocks the time spent waiting on its deployment, which becomes the response's timings.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedTokenizerBase

from raypipe.inference.engines.base import Engine, Generation, GenerationParams
from raypipe.prompts import GeneratorPrompt
from raypipe.retrieval.types import Passage


@dataclass
class CallClock:
    """Calls made through one proxy and the seconds spent waiting for them."""

    timeout_s: float
    calls: int = 0
    seconds: float = 0.0

    def call(self, method: Any, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return method.remote(*args).result(timeout_s=self.timeout_s)
        finally:
            self.calls += 1
            self.seconds += time.perf_counter() - start


class RemoteEngine(Engine):
    """`Engine` calls forwarded to the Generator deployment; the tokenizer and the prompt format are
    local (the decoder reads reflection-token ids and writes prompts with them)."""

    def __init__(self, generator: Any, tokenizer: PreTrainedTokenizerBase, prompt: GeneratorPrompt, clock: CallClock):
        self.generator, self.tokenizer, self.prompt, self.clock = generator, tokenizer, prompt, clock

    def generate(self, prompts: list[str], params: GenerationParams) -> list[Generation]:
        return self.clock.call(self.generator.generate, prompts, params)

    def next_token_probs(self, prompts: list[str], tokens: tuple[str, ...]) -> list[dict[str, float]]:
        return self.clock.call(self.generator.next_token_probs, prompts, tokens)


class RemoteSearcher:
    """`search` forwarded to a retrieval deployment (Retrieval, WebSearch). Those serve every Decoder's
    requests alike and merge their calls, so whose a query is stays here."""

    def __init__(self, retriever: Any, clock: CallClock):
        self.retriever, self.clock = retriever, clock

    def search(self, queries: list[str], k: int, requests: Sequence[int] | None = None) -> Sequence[Sequence[Passage]]:
        return self.clock.call(self.retriever.search, queries, k)


class RemoteScorer:
    """`score` forwarded to the Evaluator deployment (CRAG's retrieval evaluator)."""

    def __init__(self, evaluator: Any, clock: CallClock):
        self.evaluator, self.clock = evaluator, clock

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        return self.clock.call(self.evaluator.score, list(pairs))


class RemoteRewriter:
    """`rewrite` forwarded to the QueryRewriter deployment (CRAG's `openai` query rewriter)."""

    def __init__(self, rewriter: Any, clock: CallClock):
        self.rewriter, self.clock = rewriter, clock

    def rewrite(self, questions: Sequence[str]) -> list[Any]:
        return self.clock.call(self.rewriter.rewrite, list(questions))
