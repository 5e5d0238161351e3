"""The base of every config section: a pydantic model that refuses unknown keys, so a typo in a YAML
file or a `--set` is an error naming the key rather than a silent fall-back to a default; and the mark
of a decoding setting that a request may not override.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.fields import FieldInfo


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


T = TypeVar("T")


def check_keyed_amounts(value: Mapping[str, float], known: Sequence[str], what: str = "key") -> None:
    """Refuse a mapping (aspect -> size, kind -> odds, ...) with a key outside `known` or a negative
    value: a misspelt key would otherwise be ignored and leave its setting at the default."""
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ValueError(f"unknown {what}(s) {unknown}; the {what}s are {list(known)}")
    if any(v < 0 for v in value.values()):
        raise ValueError(f"values must be >= 0, got {dict(value)}")


class _ServerOnlyMark:
    """The metadata `ServerOnly[...]` puts on a field."""


#: a decoding setting that a request's controls leave out (raypipe.serving.schemas derives the
#: controls from every other field of a method's settings): the server's endpoints and credentials (a
#: request must not send the server's key elsewhere), what describes the served model rather than a
#: request (the trajectory format it was trained on), and what the API leaves to the server's operator
ServerOnly = Annotated[T, _ServerOnlyMark()]


def is_server_only(field: FieldInfo) -> bool:
    return any(isinstance(m, _ServerOnlyMark) for m in field.metadata)
