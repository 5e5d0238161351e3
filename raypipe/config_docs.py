"""docs/configuration.md, generated from the settings models so the manual cannot drift from the code:
`python -m raypipe.config_docs > docs/configuration.md` (`make docs`; a unit test fails when the
committed page differs from what this writes).

Every section of `RaypipeConfig` (raypipe/settings/, each method's settings.py, raypipe/config.py)
becomes one part of the page, titled by its key path: the class docstring, then one row per key with
its type, default and description. A description is the `#:` comment block right above the field in
its class (the convention Sphinx's autodoc reads), else the field's `description`; a path's default is
its rule in `raypipe.settings.paths.DERIVED_PATHS`, since its literal default only holds for the default
`run_dir`. It sits beside config.py, above every settings module, because it needs the composed config.
"""

from __future__ import annotations

import ast
import inspect
import json
import sys
import textwrap
import types
from collections.abc import Iterator
from functools import cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from raypipe.config import MOVED_KEYS, MethodsConfig, RaypipeConfig
from raypipe.settings.base import is_server_only
from raypipe.settings.paths import DERIVED_PATHS, HELDOUT_SETS

COMMAND = "python -m raypipe.config_docs > docs/configuration.md"

#: defaults that derive from other keys, shown as their rule (`{run}` is `run_dir`)
_RULES = {**dict(DERIVED_PATHS), "eval.eval_sets": "{world.out_dir}/eval/: " + ", ".join(HELDOUT_SETS),
          **{f"methods.{name}.top_k": "{retrieval.top_k}" for name in MethodsConfig.model_fields}}

_HEADER = f"""# Configuration

Every key of a raypipe config, its type, default and what it does. Generated from the settings
models (`raypipe/settings/`, each method's `raypipe/methods/<name>/settings.py`, `raypipe/config.py`)
by `{COMMAND}` (`make docs`): do not edit this page by hand; `tests/unit/test_config_docs.py` fails
when it is out of date. How to set a key (a YAML file, `extends`, `--set key.path=value`):
[cli.md](cli.md). A path's default derives from `run_dir` or from another path, written
`{{run}}/...` or `{{other.key}}/...`; an unknown key is an error naming it.
"""


@cache
def _comments(cls: type) -> dict[str, str]:
    """Field -> the `#:` comment block right above its declaration in `cls`'s own source."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # a model made by pydantic.create_model has no source
        return {}
    lines = source.splitlines()
    found: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            block: list[str] = []
            row = node.lineno - 2
            while row >= 0 and lines[row].strip().startswith("#:"):
                block.insert(0, lines[row].strip()[2:].strip())
                row -= 1
            if block:
                found[node.target.id] = " ".join(block)
    return found


def _description(model: type[BaseModel], name: str, field: FieldInfo) -> str:
    """The field's `#:` comment (from the nearest class of the MRO that declares it), else its
    `description`; a method setting a request may not override says so."""
    text = next((c[name] for cls in model.__mro__ if name in (c := _comments(cls))), None) or field.description or ""
    if is_server_only(field):
        text = (text + " " if text else "") + "(server only: a request may not set it)"
    return text


def _type(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type(args[0])
    if origin is Literal:
        return " / ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(_type(a) for a in args)
    if origin is list:
        return f"list of {_type(args[0])}"
    if origin is dict:
        return f"map of {_type(args[0])} to {_type(args[1])}"
    if annotation is type(None):
        return "null"
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)


def _bounds(field: FieldInfo) -> str:
    marks = {Ge: ">=", Gt: ">", Le: "<=", Lt: "<"}
    found = [f"{sign} {getattr(m, type(m).__name__.lower())}" for m in field.metadata
             for kind, sign in marks.items() if isinstance(m, kind)]
    return f" ({', '.join(found)})" if found else ""


def _default(key: str, field: FieldInfo) -> str:
    if key in _RULES:
        return f"`{_RULES[key]}`"
    value = field.default
    if value is PydanticUndefined:
        value = field.default_factory() if field.default_factory else None  # type: ignore[call-arg]
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    elif isinstance(value, list):
        value = [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]
    return f"`{json.dumps(value)}`"


def _section_type(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field holds (itself a section), or None for a value."""
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _item_model(annotation: Any) -> type[BaseModel] | None:
    """The model of a list-of-models field (each item validated as a section, e.g. training stages)."""
    args = get_args(annotation)
    return _section_type(args[0]) if get_origin(annotation) is list and args else None


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _docstring(model: type[BaseModel]) -> str:
    doc = model.__dict__.get("__doc__")
    return " ".join(inspect.cleandoc(doc).split()) if doc else ""


def _sections(model: type[BaseModel], path: str, seen_items: set[type]) -> Iterator[tuple[str, type[BaseModel], list[str]]]:
    """(key path, model, table rows) for `model` at `path`, then for each section inside it."""
    rows, inner = [], []
    for name, field in model.model_fields.items():
        key = f"{path}.{name}" if path else name
        section = _section_type(field.annotation)
        if section is not None:
            inner.append((key, section))
            continue
        item = _item_model(field.annotation)
        kind = f"list of `{key}[]` (below)" if item is not None and item not in seen_items else _type(field.annotation)
        if item is not None and item not in seen_items:
            seen_items.add(item)
            inner.append((f"{key}[]", item))
        rows.append(f"| `{name}` | {_cell(kind + _bounds(field))} | {_cell(_default(key, field))} | "
                    f"{_cell(_description(model, name, field))} |")
    yield path, model, rows
    for key, section in inner:
        yield from _sections(section, key, seen_items)


def configuration_markdown() -> str:
    """The whole page."""
    out = [_HEADER]
    for path, model, rows in _sections(RaypipeConfig, "", set()):
        out.append(f"## `{path}`" if path else "## Top level")
        out.append("")
        if doc := _docstring(model):
            out += [doc, ""]
        if rows:
            out += ["| key | type | default | description |", "| --- | --- | --- | --- |", *rows, ""]
    out += ["## Keys that moved", "", "An old key in a file is an error naming its new place.", "",
            "| old key | new key |", "| --- | --- |", *(f"| `{old}` | `{new}` |" for old, new in MOVED_KEYS.items()), ""]
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(configuration_markdown())
