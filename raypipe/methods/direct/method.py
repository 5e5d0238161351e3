"""The `direct` method: the plain generator answers the request as it is, with no retrieval.

It is the papers' "no retrieval" baseline (Self-RAG Table 2's LMs without retrieval; CRAG's and
Self-Reasoning's base models answering alone) in eval, and, served, it turns raypipe's server into an
OpenAI-compatible endpoint for the instruct LM: the trajectory teacher and the critic teacher can then
run against raypipe's own server (`teacher.extra_body: {method: direct}`, or `serve.default_method:
direct`).
"""

from __future__ import annotations

from collections.abc import Sequence

from raypipe.methods.base import Method, MethodRequest, MethodResult, ToolName
from raypipe.methods.direct.settings import DirectSettings
from raypipe.methods.plain_generator import generate_answers


class Direct(Method[DirectSettings]):
    """One greedy answer of the plain generator (`lm`: chat template; `engine`: the Self-RAG format)."""

    name = "direct"
    settings_type = DirectSettings
    tool_names = ("engine", "lm")

    @classmethod
    def uses(cls, settings: DirectSettings) -> set[ToolName]:
        return {settings.generator}

    def decode(self, requests: Sequence[MethodRequest], settings: DirectSettings) -> list[MethodResult]:
        generator = self.toolkit.get(settings.generator, self.name)
        return generate_answers(generator, settings.generator, requests, [""] * len(requests), settings.max_new_tokens)
