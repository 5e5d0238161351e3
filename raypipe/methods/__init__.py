"""Decoding methods as peers behind one interface (`base.Method`), looked up by name.

Each method is a package `methods/<name>/` whose `method.py` holds its class; the registry maps the
method's name (its `methods.<name>` config section, and a request's `method`) to that class, imported
on first use, so importing this package stays cheap. What several methods share lives beside them:
`base` (the interface, `Toolkit`), `closed_set` (answer options) and `plain_generator` (the generator
of `rag`, `crag` and `direct`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Literal, get_args

from raypipe.errors import ConfigError

if TYPE_CHECKING:
    from raypipe.methods.base import Method

#: the registered decoding methods; a `methods.<name>` section each (raypipe.config.MethodsConfig)
MethodName = Literal["selfrag", "crag", "rag", "selfcrag", "self_reasoning", "direct"]

#: name -> "module:Class"; every name of MethodName and no other
REGISTRY: dict[str, str] = {
    "selfrag": "raypipe.methods.selfrag.method:SelfRAG",
    "crag": "raypipe.methods.crag.method:CRAG",
    "rag": "raypipe.methods.rag.method:RAG",
    "selfcrag": "raypipe.methods.selfcrag.method:SelfCRAG",
    "self_reasoning": "raypipe.methods.self_reasoning.method:SelfReasoning",
    "direct": "raypipe.methods.direct.method:Direct",
}

METHOD_NAMES: tuple[str, ...] = get_args(MethodName)


def get_method(name: str) -> type[Method]:
    """The method class registered as `name`; an unknown name lists the known ones."""
    if name not in REGISTRY:
        raise ConfigError(f"unknown method {name!r}; known methods: {', '.join(REGISTRY)}")
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)
