"""The Decoder deployment: runs each request's method (raypipe.methods) over proxies of the bound
model deployments (ARCHITECTURE.md, "Serving").

It holds no model, only tokenizers, so this module imports no torch: a Decoder replica, the one that
autoscales with the load, starts in seconds rather than the ten a torch import takes on 2 cores.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from raypipe.methods import get_method
from raypipe.methods.base import TOOL_KINDS, MethodRequest, MethodResult, Toolkit, ToolName
from raypipe.methods.settings import MethodSettings
from raypipe.models import load_tokenizer
from raypipe.models.prompt_format import generator_prompt
from raypipe.serving.remote import CallClock, RemoteEngine, RemoteRewriter, RemoteScorer, RemoteSearcher

#: how a response's timings name the calls of each tool (`<label>_ms`, `<label>_calls`; default: its name)
TIMING_LABELS: dict[ToolName, str] = {"engine": "generation", "retriever": "retrieval", "web": "web_search",
                                 "lm": "lm_generation", "rewriter": "query_rewriting"}


@serve.deployment
class Decoder:
    """Runs one request at a time per worker thread (`concurrency` threads) with the method it names,
    over proxies of the bound deployments (`handles`: tool name -> deployment). Autoscaled on its
    ongoing requests."""

    def __init__(self, handles: dict[str, DeploymentHandle], model_path: str, concurrency: int, call_timeout_s: float,
                 lm_path: str | None = None):
        self.handles, self.call_timeout_s = handles, call_timeout_s
        self.tokenizer = load_tokenizer(model_path)
        self.prompt = generator_prompt(model_path, self.tokenizer)
        #: the instruct LM's tokenizer (its chat template) when the `lm` tool is bound
        self.lm_tokenizer = load_tokenizer(lm_path) if "lm" in handles and lm_path else None
        self.lm_prompt = generator_prompt(lm_path, self.lm_tokenizer) if self.lm_tokenizer is not None else None
        self.threads = ThreadPoolExecutor(concurrency, thread_name_prefix="decoder")

    async def decode(self, method: str, request: MethodRequest, settings: MethodSettings) -> dict[str, Any]:
        """`MethodResult.as_dict()` plus `timings` (ms) and `usage` (token counts)."""
        return await asyncio.get_running_loop().run_in_executor(self.threads, self._decode, method, request,
                                                                settings)

    def _decode(self, method: str, request: MethodRequest, settings: MethodSettings) -> dict[str, Any]:
        clocks = {name: CallClock(self.call_timeout_s) for name in self.handles}
        toolkit = Toolkit.build(self.handles, lambda name: self._proxy(name, clocks[name]))
        start = time.perf_counter()
        result = get_method(method)(toolkit).decode([request], settings)[0]
        timings = {"decode_ms": (time.perf_counter() - start) * 1000}
        for name in toolkit.held():
            label = TIMING_LABELS.get(name, name)
            timings[f"{label}_ms"] = clocks[name].seconds * 1000
            timings[f"{label}_calls"] = clocks[name].calls
        return {**result.as_dict(), "timings": {k: round(v, 2) for k, v in timings.items()},
                "usage": self._usage(request, settings, result)}

    def _proxy(self, name: ToolName, clock: CallClock) -> Any:
        """Tool `name` as a proxy of its deployment; an engine's prompts are written here, with the
        tokenizer and prompt format of its model."""
        kind = TOOL_KINDS[name]
        if kind == "engine":
            tokenizer, prompt = (self.lm_tokenizer, self.lm_prompt) if name == "lm" else (self.tokenizer, self.prompt)
            return RemoteEngine(self.handles[name], tokenizer, prompt, clock)
        if kind == "searcher":
            return RemoteSearcher(self.handles[name], clock)
        if kind == "rewriter":
            return RemoteRewriter(self.handles[name], clock)
        return RemoteScorer(self.handles[name], clock)

    def _usage(self, request: MethodRequest, settings: MethodSettings, result: MethodResult) -> dict[str, int]:
        """Prompt tokens, and the tokens the model wrote for the answer (retrieved passages excluded:
        a Self-RAG trace lists what each segment wrote), in the tokens of the model that answered: a
        plain generator set to `lm` (direct, rag, crag) is the instruct LM, prompted by its chat template."""
        if getattr(settings, "generator", None) == "lm" and self.lm_tokenizer is not None:
            from raypipe.methods.plain_generator import lm_user_turn
            from raypipe.prompts import chat_prompt

            tokenizer, prompt = self.lm_tokenizer, chat_prompt(self.lm_tokenizer, lm_user_turn(request, ""))
        else:
            tokenizer, prompt = self.tokenizer, self.prompt(request.instruction, request.input)
        written = [s["raw"] for s in result.trace.get("segments", [])] or [result.text]
        count = tokenizer(written, add_special_tokens=False)["input_ids"]
        return {"prompt_tokens": len(tokenizer(prompt)["input_ids"]),
                "completion_tokens": sum(len(ids) for ids in count)}
