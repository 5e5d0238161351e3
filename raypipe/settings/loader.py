"""Reading a config: a YAML file (with the files it `extends`), `--set a.b=value` overrides, keys that
moved, and validation errors that name the key path and where its value came from.

Generic over the root model, so the loader knows no section: the composed config
(`raypipe.config.load_config`) passes its root model and its moved keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from raypipe.errors import ConfigError

Root = TypeVar("Root", bound=BaseModel)


def moved_key_errors(data: dict[str, Any], source: str, moved: Mapping[str, str]) -> list[str]:
    """One line per key of `data` that `moved` (old key -> new key) lists, naming where it lives now."""
    lines = []
    for old, new in moved.items():
        node: Any = data
        for key in old.split("."):
            node = node.get(key, _ABSENT) if isinstance(node, dict) else _ABSENT
        if node is not _ABSENT:
            lines.append(f"{source}: {old}: this key moved to {new}")
    return lines


_ABSENT = object()


def _nested(dotted: str, value: Any) -> dict[str, Any]:
    """`a.b=v` as {"a": {"b": v}}."""
    out: dict[str, Any] = {}
    set_path(out, dotted, value, "--set")
    return out


def set_path(data: dict[str, Any], dotted: str, value: Any, source: str) -> None:
    keys = dotted.split(".")
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: cannot set {dotted!r}: {'.'.join(keys[: i + 1])} is not a section")
        node = child
    node[keys[-1]] = value


def parse_override(item: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", value), the value read as a YAML scalar (so 3 is int, true is bool)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key.path=value")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {item!r}: empty key")
    return key, yaml.safe_load(raw) if raw.strip() else ""


#: a config file's key naming the file it extends (relative to itself): that file's settings, with
#: this file's on top (mappings merge key by key; any other value, lists included, replaces)
EXTENDS_KEY = "extends"


def merged(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def config_file_layers(path: Path, chain: tuple[Path, ...] = ()) -> list[tuple[str, dict[str, Any]]]:
    """(file, its own mapping) of a YAML config file and of every file it `extends`, the base first:
    merged in this order they are the file's settings (`read_config_file`); kept apart they say which
    file set which key (raypipe.settings.sources)."""
    if not path.exists():
        raise ConfigError(f"config file not found: {path}" + (f" (extended by {chain[-1]})" if chain else ""))
    if path.resolve() in chain:
        raise ConfigError(f"{chain[-1]}: {EXTENDS_KEY}: {path} extends itself through {[str(c) for c in chain]}")
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(loaded).__name__}")
    parent = loaded.pop(EXTENDS_KEY, None)
    if parent is None:
        return [(str(path), loaded)]
    if not isinstance(parent, str):
        raise ConfigError(f"{path}: {EXTENDS_KEY} must be a file path, got {parent!r}")
    return [*config_file_layers(path.parent / parent, (*chain, path.resolve())), (str(path), loaded)]


def read_config_file(path: Path) -> dict[str, Any]:
    """A YAML config file's mapping, with the file it `extends` (and that file's, ...) underneath."""
    data: dict[str, Any] = {}
    for _, layer in config_file_layers(path):
        data = merged(data, layer)
    return data


def load_settings(root: type[Root], path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (),
                  moved: Mapping[str, str] | None = None) -> Root:
    """Read a YAML config (or the defaults when `path` is None), apply `--set` overrides and validate it
    as `root`; a key that `moved` (old -> new) lists is an error naming its new place.

    Errors name the key path and the file: ``configs/demo.yaml: training.critic.lr: Input should be
    greater than 0``.
    """
    moved = moved or {}
    source = str(path) if path is not None else "<defaults>"
    data = read_config_file(Path(path)) if path is not None else {}
    errors = moved_key_errors(data, source, moved)
    set_by: dict[tuple[str, ...], str] = {}
    for item in overrides:
        key, value = parse_override(item)
        errors += [line.replace(f"<set>: {key}:", f"--set {item}:")
                   for line in moved_key_errors(_nested(key, value), "<set>", moved)]
        set_path(data, key, value, f"{source} (--set {item})")
        set_by[tuple(key.split("."))] = item
    if errors:
        raise ConfigError("\n".join(errors))
    try:
        return root.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "<root>"
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            lines.append(f"{_blame(err, set_by, source)}: {loc}: {msg}")
        raise ConfigError("\n".join(lines)) from None


def _blame(err: Any, set_by: dict[tuple[str, ...], str], source: str) -> str:
    """Where the value a validation error is about came from: the last `--set` whose key covers the
    error's location (`--set a.b=1` for an error at a.b or a.b.c), or whose key runs through the bad
    value (`--set a.b.c=1` made a.b a mapping where a number belongs); else the file (or
    `<defaults>`)."""
    path = tuple(str(x) for x in err["loc"])
    if not path:
        return source
    for key, item in reversed(list(set_by.items())):
        on_path = key[:len(path)] == path[:len(key)]
        if on_path and (len(key) <= len(path) or _holds(err.get("input"), key[len(path):])):
            return f"--set {item}"
    return source


def _holds(value: Any, keys: tuple[str, ...]) -> bool:
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    return True
