"""The model-side Ray Serve deployments: Retrieval, Generator, Evaluator and WebSearch (ARCHITECTURE.md,
"Serving"); the Decoder is in decoder.py and the HTTP ingress in ingress.py, both without torch.

    HTTP -> Ingress (FastAPI) -> Decoder (autoscaled) -> Generator (engine, @serve.batch)
                                                      -> Retrieval (encoder + faiss, @serve.batch)

The Decoder holds no model: it looks up the request's method (raypipe.methods) and runs it over
proxies of the shared Generator and Retrieval deployments, whose `@serve.batch` handlers merge the
calls of concurrent requests into one engine call (grouped by compatible settings, see batching.py).
On GPU the same batch is one call to vLLM, which schedules it with its own continuous batching.
Only the deployments the served methods use are bound (`Method.tool_names`).

Model-holding replicas run their model calls in one worker thread with torch limited to
`serve.torch_threads`, so N replicas on N cores do not fight over threads; the event loop stays free
to collect the next batch meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from ray import serve

from raypipe.inference.engines.base import Generation, GenerationParams
from raypipe.methods.base import ToolName
from raypipe.retrieval.types import Passage
from raypipe.serving.batching import run_grouped
from raypipe.tools import ToolSources, load_tool

logger = logging.getLogger(__name__)


def _set_batching(handler: Any, max_batch_size: int, wait_s: float) -> None:
    handler.set_max_batch_size(max_batch_size)
    handler.set_batch_wait_timeout_s(wait_s)


class _BatchedModel:
    """A model held in one worker thread, with torch limited to `threads` there (OpenMP keeps thread
    counts per thread, so it is set in that thread too); the `@serve.batch` handlers of subclasses run
    their merged calls in it through `_run`, which counts calls and engine calls."""

    def _start(self, threads: int) -> None:
        torch.set_num_threads(threads)
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="model", initializer=torch.set_num_threads,
                                         initargs=(threads,))
        self.counts = {"calls": 0, "engine_calls": 0}

    def batching_stats(self) -> dict[str, int]:
        """Calls received and model calls made so far: how much batching merged (load test, tests)."""
        return dict(self.counts)

    async def _run(self, calls: list[tuple[list[Any], Any]], compute: Callable[[list[Any], Any], list[Any]]) -> list[Any]:
        def counted(items: list[Any], key: Any) -> list[Any]:
            self.counts["engine_calls"] += 1
            return compute(items, key)

        self.counts["calls"] += len(calls)
        return await asyncio.get_running_loop().run_in_executor(self.thread, run_grouped, calls, counted)


@serve.deployment
class Retrieval(_BatchedModel):
    """The dense retriever (query encoder + faiss index) of `sources.retrieval`, shared by all decoders."""

    def __init__(self, sources: ToolSources, threads: int, max_batch_size: int, batch_wait_timeout_s: float):
        self._start(threads)
        self.retriever = self.thread.submit(load_tool, "retriever", sources).result()
        _set_batching(self._search_batch, max_batch_size, batch_wait_timeout_s)

    async def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        return await self._search_batch((queries, k))

    @serve.batch
    async def _search_batch(self, calls: list[tuple[list[str], int]]) -> list[list[list[Passage]]]:
        return await self._run(calls, self.retriever.search)


@serve.deployment
class Generator(_BatchedModel):
    """A generation engine (`engine.kind`: vLLM or HF transformers) holding the `kind` tool (the
    generator or the instruct LM), shared by all decoders."""

    def __init__(self, kind: ToolName, sources: ToolSources, threads: int, max_batch_size: int,
                 batch_wait_timeout_s: float):
        self._start(threads)
        self.engine = self.thread.submit(load_tool, kind, sources).result()
        for handler in (self._generate_batch, self._next_batch):
            _set_batching(handler, max_batch_size, batch_wait_timeout_s)

    async def generate(self, prompts: list[str], params: GenerationParams) -> list[Generation]:
        return await self._generate_batch((prompts, params))

    async def next_token_probs(self, prompts: list[str], tokens: tuple[str, ...]) -> list[dict[str, float]]:
        return await self._next_batch((prompts, tokens))

    @serve.batch
    async def _generate_batch(self, calls: list[tuple[list[str], GenerationParams]]) -> list[list[Generation]]:
        return await self._run(calls, self.engine.generate)

    @serve.batch
    async def _next_batch(self, calls: list[tuple[list[str], tuple[str, ...]]]) -> list[list[dict[str, float]]]:
        return await self._run(calls, self.engine.next_token_probs)


@serve.deployment
class Evaluator(_BatchedModel):
    """CRAG's retrieval evaluator (a cross-encoder), shared by all decoders; concurrent score calls
    are merged into one forward pass series. A missing checkpoint fails the replica at startup with
    the path in the error."""

    def __init__(self, sources: ToolSources, threads: int, max_batch_size: int, batch_wait_timeout_s: float):
        self._start(threads)
        self.evaluator = self.thread.submit(load_tool, "evaluator", sources).result()
        _set_batching(self._score_batch, max_batch_size, batch_wait_timeout_s)

    async def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        return await self._score_batch((pairs, None))

    @serve.batch
    async def _score_batch(self, calls: list[tuple[list[tuple[str, str]], None]]) -> list[list[float]]:
        return await self._run(calls, lambda pairs, _: self.evaluator.score(pairs))


@serve.deployment
class WebSearch:
    """CRAG's second search source (`retrieval.fallback`: the local web index or an HTTP search API).
    Calls are not merged: a failing web query must fail only its own request, which then falls back
    to internal knowledge."""

    def __init__(self, sources: ToolSources, threads: int):
        torch.set_num_threads(threads)
        self.web = load_tool("web", sources)

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        return [list(hits) for hits in self.web.search(queries, k)]


@serve.deployment
class QueryRewriter:
    """CRAG's `openai` query rewriter (`crag.rewriter`): an OpenAI-compatible chat endpoint, a few
    requests in flight. Calls are not merged: a failed rewrite falls back to its own raw question."""

    def __init__(self, sources: ToolSources):
        self.rewriter = load_tool("rewriter", sources)

    def rewrite(self, questions: list[str]) -> list[Any]:
        return self.rewriter.rewrite(questions)
