"""The base of every decoding method's settings, and the plain generator's settings that `rag` and
`direct` share."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from raypipe.settings.base import Section


class MethodSettings(Section):
    """A decoding method's settings (raypipe.methods): its `methods.<name>` section and the schema of
    its per-request controls, so that a YAML file and an HTTP request are validated alike.

    Every method that searches reads its K here. In a config it defaults to `retrieval.top_k`
    (`RaypipeConfig` fills each section's `top_k` it does not set), so a request's settings resolve in
    one order: the request's controls, then the server's `methods.<name>`, then `retrieval.top_k`."""

    top_k: int = Field(5, ge=1, description="passages per search (K)")


class PlainGeneratorSettings(MethodSettings):
    """A plain generator (raypipe.methods.plain_generator): the instruct LM through its chat template
    (`lm`) or the Self-RAG generator (`engine`), one greedy answer of `max_new_tokens` at most."""

    generator: Literal["lm", "engine"] = Field("lm", description="the instruct LM or the Self-RAG generator")
    max_new_tokens: int = Field(100, ge=1, description="tokens of the answer at most")
