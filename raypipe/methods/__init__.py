"""Decoding methods as peers behind one interface (`base.Method`), looked up by name.

The registry maps a method's name (its `methods.<name>` config section, and a request's `method`) to
its class; classes are imported on first use, so importing this package stays cheap.
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
    "selfrag": "raypipe.methods.selfrag.search:SelfRAG",
    "crag": "raypipe.methods.crag.methods:CRAG",
    "rag": "raypipe.methods.crag.methods:RAG",
    "selfcrag": "raypipe.methods.crag.selfcrag:SelfCRAG",
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
