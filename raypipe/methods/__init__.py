"""Decoding methods as peers behind one interface (`base.Method`), looked up by name.

Each method is a package `methods/<name>/`: `method.py` holds its class, `settings.py` its settings
(and its eval sweeps). `REGISTRY` is the one place a method is named: its config section
`methods.<name>`, its sweeps section `eval.sweeps.<name>`, a request's `method` and the served
controls all derive from it. The class is imported on first use and the settings modules import no
engine, so importing this package (and loading a config) stays cheap. What several methods share lives
beside them: `base` (the interface, `Toolkit`), `settings` (the settings base), `closed_set` (answer
options) and `plain_generator` (the generator of `rag`, `crag` and `direct`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from raypipe.errors import ConfigError
from raypipe.methods.crag.settings import CRAGSettings, CRAGSweeps
from raypipe.methods.direct.settings import DirectSettings
from raypipe.methods.rag.settings import RAGSettings
from raypipe.methods.self_reasoning.settings import SelfReasoningSettings, SelfReasoningSweeps
from raypipe.methods.selfcrag.settings import SelfCRAGSettings, SelfCRAGSweeps
from raypipe.methods.selfrag.settings import SelfRAGSettings, SelfRAGSweeps
from raypipe.methods.settings import MethodSettings
from raypipe.settings.base import Section

if TYPE_CHECKING:
    from raypipe.methods.base import Method


@dataclass(frozen=True)
class Registered:
    """A method as the rest of the system knows it before importing it."""

    #: "module:Class" of the `Method` subclass
    method: str
    settings: type[MethodSettings]
    #: what `raypipe eval` sweeps for it (`Method.variants`); None: the method alone
    sweeps: type[Section] | None = None


#: name -> the method; the order is the config sections' order
REGISTRY: dict[str, Registered] = {
    "selfrag": Registered("raypipe.methods.selfrag.method:SelfRAG", SelfRAGSettings, SelfRAGSweeps),
    "crag": Registered("raypipe.methods.crag.method:CRAG", CRAGSettings, CRAGSweeps),
    "rag": Registered("raypipe.methods.rag.method:RAG", RAGSettings),
    "direct": Registered("raypipe.methods.direct.method:Direct", DirectSettings),
    "selfcrag": Registered("raypipe.methods.selfcrag.method:SelfCRAG", SelfCRAGSettings, SelfCRAGSweeps),
    "self_reasoning": Registered("raypipe.methods.self_reasoning.method:SelfReasoning", SelfReasoningSettings,
                                 SelfReasoningSweeps),
}

METHOD_NAMES: tuple[str, ...] = tuple(REGISTRY)
#: a registered method's name, as configs and requests are validated against it
MethodName = Literal[METHOD_NAMES]  # type: ignore[valid-type]


def get_method(name: str) -> type[Method]:
    """The method class registered as `name`; an unknown name lists the known ones."""
    if name not in REGISTRY:
        raise ConfigError(f"unknown method {name!r}; known methods: {', '.join(REGISTRY)}")
    module, cls = REGISTRY[name].method.split(":")
    return getattr(importlib.import_module(module), cls)
