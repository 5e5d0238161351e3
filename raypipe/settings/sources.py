"""Where each value of a resolved config came from, and the config as YAML with that said beside every
value (`raypipe config show`).

A value comes from its section's default (a path default being its rule in `DERIVED_PATHS`, applied
to `run_dir`), from a config file (named: with `extends` several files contribute), or from a
`--set`. The sources are found by replaying what the loader does (file layers merged base first, then
each `--set` replacing its key) on a tree of labels instead of values, so the two cannot disagree on
which layer wins.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from raypipe.settings.loader import config_file_layers, merged, parse_override, set_path
from raypipe.settings.paths import DERIVED_PATHS

#: the source of a value that neither a file nor a --set gave
DEFAULT = "default"

#: a path key's rule, shown beside the path it produced (`eval.eval_sets` follows `world.out_dir`)
_RULES = {**dict(DERIVED_PATHS), "eval.eval_sets": "{world.out_dir}/eval/heldout_*.jsonl"}

#: the column the source comments start at, so that they read as one column
_COMMENT_COLUMN = 64


def value_sources(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """A tree shaped like the config's data whose leaves are the label of the layer that set them:
    `file <path>` or `--set <item>`; a key absent from the tree kept its default."""
    tree: dict[str, Any] = {}
    if path is not None:
        for file, layer in config_file_layers(Path(path)):
            tree = merged(tree, _labelled(layer, f"file {os.path.normpath(file)}"))
    for item in overrides:
        key, value = parse_override(item)
        set_path(tree, key, _labelled(value, f"--set {item}"), "--set")
    return tree


def _labelled(value: Any, label: str) -> Any:
    """`value` with every leaf replaced by `label` (mappings kept, so that merging them merges as the
    loader merges values)."""
    if isinstance(value, dict):
        return {key: _labelled(inner, label) for key, inner in value.items()}
    return label


def source_of(tree: dict[str, Any], keys: tuple[str, ...]) -> str:
    """The label of the layer that set the value at `keys`: the deepest label on the way down (a file
    or --set that set a whole list or mapping set everything under it), else DEFAULT."""
    node: Any = tree
    for key in keys:
        if isinstance(node, str):
            return node
        if not isinstance(node, dict) or key not in node:
            return DEFAULT
        node = node[key]
    return node if isinstance(node, str) else DEFAULT


def annotated_yaml(cfg: BaseModel, tree: dict[str, Any]) -> str:
    """The resolved config as block YAML (it loads back to `cfg.model_dump(mode="json")`), one value per
    line, each followed by `# <source>`; a derived path's default names its rule."""
    lines: list[str] = []

    def walk(data: dict[str, Any], keys: tuple[str, ...]) -> None:
        pad = "  " * len(keys)
        for key, value in data.items():
            here = (*keys, key)
            if isinstance(value, dict) and value:
                lines.append(f"{pad}{key}:")
                walk(value, here)
                continue
            source = source_of(tree, here)
            if source == DEFAULT and ".".join(here) in _RULES:
                source = f"{DEFAULT} ({_RULES['.'.join(here)]})"
            line = f"{pad}{key}: {yaml_flow(value)}"
            lines.append(f"{line:<{_COMMENT_COLUMN}}  # {source}")

    walk(cfg.model_dump(mode="json"), ())
    return "\n".join(lines) + "\n"


def yaml_flow(value: Any) -> str:
    """`value` as one line of YAML (flow style), quoted where YAML would read it as another type."""
    text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), sort_keys=False)
    return text.removesuffix("\n").removesuffix("\n...").strip()
