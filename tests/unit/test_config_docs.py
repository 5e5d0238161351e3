"""docs/configuration.md is what `raypipe.config_docs` writes from the settings models, every key is
on it with a description, and the generator reads `#:` comments, bounds, derived-path defaults and
server-only marks as it says."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Literal

from pydantic import Field

from raypipe.config import RaypipeConfig
from raypipe.config_docs import COMMAND, _sections, configuration_markdown
from raypipe.settings.base import Section, ServerOnly

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_committed_page_is_what_the_models_generate():
    committed, generated = PAGE.read_text(encoding="utf-8"), configuration_markdown()
    if committed != generated:
        diff = difflib.unified_diff(committed.splitlines(), generated.splitlines(), "committed", "generated",
                                    lineterm="", n=1)
        shown = "\n".join(list(diff)[:30])
        raise AssertionError(f"docs/configuration.md is stale: run `make docs` ({COMMAND})\n{shown}")


def _leaf_keys(model: type, path: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        key = f"{path}.{name}" if path else name
        sub = field.annotation
        keys += _leaf_keys(sub, key) if isinstance(sub, type) and issubclass(sub, Section) else [key]
    return keys


def test_every_key_of_the_config_is_on_the_page_with_a_description():
    rows: dict[str, str] = {}  # key path -> description
    section = ""
    for line in configuration_markdown().splitlines():
        if line.startswith("## "):  # `a.b`, or a part that lists no keys ("Keys that moved")
            section = {"## Top level": "<top>"}.get(line, line[4:-1] if line.startswith("## `") else "")
        elif line.startswith("| `") and section:
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[f"{section}.{cells[0].strip('`')}"] = cells[3]
    keys = [k if "." in k else f"<top>.{k}" for k in _leaf_keys(RaypipeConfig)]
    # a list's items (training stages) are documented in a part of their own, `<list key>[]`
    assert sorted(k for k in rows if "[]" not in k) == sorted(keys)
    undescribed = sorted(k for k, text in rows.items() if not text)
    assert not undescribed, f"keys without a `#:` comment in their settings class: {undescribed}"


class _Base(Section):
    """A base section."""

    #: inherited: said once, in the base
    shared: int = Field(3, ge=1, lt=10)


class _Example(_Base):
    """An example section: its docstring heads its part of the page."""

    #: the first line of a comment
    #: and its second line
    commented: Literal["a", "b"] = "a"
    described: float | None = Field(None, description="from the Field")
    # a plain comment is not a description
    undocumented: list[str] = ["x"]
    #: a knob only the server's operator sets
    secret: ServerOnly[str] = "k"


def test_rows_come_from_comments_bounds_and_marks():
    (path, model, rows), = list(_sections(_Example, "ex", set()))
    assert (path, model) == ("ex", _Example)
    by_key = {row.split(" | ")[0].strip("| `"): [c.strip() for c in row.strip("|").split(" | ")] for row in rows}
    assert by_key["shared"] == ["`shared`", "int (>= 1, < 10)", "`3`", "inherited: said once, in the base"]
    assert by_key["commented"] == ["`commented`", "`a` / `b`", '`"a"`', "the first line of a comment and its second line"]
    assert by_key["described"][1:] == ["float or null", "`null`", "from the Field"]
    assert by_key["undocumented"][1:] == ["list of str", '`["x"]`', ""]
    assert by_key["secret"][3] == "a knob only the server's operator sets (server only: a request may not set it)"


def test_a_derived_path_shows_its_rule_and_a_list_of_sections_its_own_part():
    page = configuration_markdown()
    assert "| `out_dir` | str | `{run}/models/generator` |" in page
    assert "| `base_model` | str | `{tiny_model.out_dir}` |" in page
    # the training stages' fields are documented once, under the first list that holds them
    assert page.count("## `training.critic.stages[]`") == 1 and "stages[]`" not in page.split("## `training.generator`")[1]
