"""Unknown keys in a settings mapping, and the closest valid name: the one wording every settings check uses.

Pure helpers over pydantic models (the manifest, a backend's settings class); callers turn what they find
into their own error naming the file.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel


def closest(name: str, valid: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the closest valid name, or the list of valid names when none is close."""
    names = sorted(set(valid))
    match = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    if match:
        return f"did you mean '{match[0]}'? (valid: {', '.join(names)})"
    return f"valid: {', '.join(names)}"


def unknown_keys(raw: dict[Any, Any], model: type[BaseModel], where: str = "") -> list[tuple[str, Any, list[str]]]:
    """Keys of `raw` that `model` (and its nested models) does not declare: (parent path, key, valid keys)."""
    found: list[tuple[str, Any, list[str]]] = []
    fields = model.model_fields
    for key, value in raw.items():
        if key not in fields:
            found.append((where, key, list(fields)))
            continue
        nested = _model_of(fields[key].annotation)
        if nested is not None and isinstance(value, dict):
            found += unknown_keys(value, nested, f"{where}.{key}" if where else str(key))
    return found


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, UnionType):
        for arg in get_args(annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                return arg
    return None
