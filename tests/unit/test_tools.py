"""The tools layer (raypipe.tools): one loader per tool kind, and a toolkit built from them."""

from __future__ import annotations

from typing import get_args

import pytest

from raypipe import tools
from raypipe.methods.base import ToolName
from raypipe.settings.models import EngineConfig
from raypipe.settings.retrieval import RetrievalConfig

SOURCES = tools.ToolSources("gen", EngineConfig(kind="hf"), RetrievalConfig())


def test_every_tool_kind_has_a_loader():
    assert set(tools.LOADERS) == set(get_args(ToolName))


@pytest.fixture
def built(monkeypatch) -> list[str]:
    """Each loader replaced by one that records its kind and returns it with the generator folder."""
    calls: list[str] = []

    def recorder(kind: str):
        return lambda sources: calls.append(kind) or f"{kind}@{sources.generator}"

    monkeypatch.setattr(tools, "LOADERS", {kind: recorder(kind) for kind in tools.LOADERS})
    return calls


def test_a_toolkit_builds_only_the_tools_named_in_a_fixed_order(built):
    toolkit = tools.load_toolkit(["web", "engine"], SOURCES)
    assert (toolkit.engine, toolkit.web, toolkit.retriever, toolkit.lm) == ("engine@gen", "web@gen", None, None)
    assert built == ["engine", "web"]  # ToolName order, whatever the order asked


def test_a_replaced_tool_is_not_loaded(built):
    stand_in = object()
    toolkit = tools.load_toolkit(["retriever", "evaluator"], SOURCES, {"retriever": lambda: stand_in})
    assert toolkit.retriever is stand_in and toolkit.evaluator == "evaluator@gen"
    assert built == ["evaluator"]
