"""The toolkit every method is built from, and the one passage type with its one rendering."""

from __future__ import annotations

from dataclasses import fields
from typing import get_args

from raypipe.methods import get_method
from raypipe.methods.base import TOOL_KINDS, Toolkit, ToolName
from raypipe.retrieval.types import Passage, first_occurrences
from raypipe.tokens import format_paragraph


def test_every_tool_has_a_field_and_a_kind_and_every_method_names_known_tools():
    names = get_args(ToolName)
    assert [f.name for f in fields(Toolkit)] == list(names) == list(TOOL_KINDS)
    for method in ("selfrag", "crag", "rag", "selfcrag", "self_reasoning", "direct"):
        assert set(get_method(method).tool_names) <= set(names)


def test_build_makes_tools_in_tool_order_and_map_wraps_each_by_name():
    made: list[str] = []

    def make(name: str) -> str:
        made.append(name)
        return f"<{name}>"

    toolkit = Toolkit.build(["lm", "web", "engine"], make)
    assert made == ["engine", "web", "lm"]  # loading order is fixed, whatever order the names come in
    assert (toolkit.engine, toolkit.retriever, toolkit.web, toolkit.lm) == ("<engine>", None, "<web>", "<lm>")
    assert toolkit.held() == ["engine", "web", "lm"]
    wrapped = toolkit.map(lambda name, tool: (TOOL_KINDS[name], tool))
    assert wrapped == Toolkit(engine=("engine", "<engine>"), web=("searcher", "<web>"), lm=("engine", "<lm>"))


def test_a_passage_reads_as_its_title_line_then_its_text_even_untitled():
    assert Passage("p1", "Ada", "Ada was born in Orr.", 0.5).text_for_model() == "Ada\nAda was born in Orr."
    assert Passage("p2", "", "No title.", 0.0).text_for_model() == "\nNo title."
    passage = Passage("p1", "Ada", "Ada was born.", 1.0)
    assert format_paragraph(passage.title, passage.text) == f"<paragraph>{passage.text_for_model()}</paragraph>"
    assert passage.as_dict() == {"id": "p1", "title": "Ada", "text": "Ada was born.", "score": 1.0}


def test_requests_with_one_retrieval_text_are_one_request_to_a_batch_scoped_searcher():
    assert first_occurrences(["a", "b", "a", "a\nb", "b"]) == [0, 1, 0, 3, 1]
