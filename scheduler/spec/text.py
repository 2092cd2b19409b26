"""User strings no store or response can carry: a lone UTF-16 surrogate (`"\\ud800"` in
JSON parses to a Python string that cannot be encoded as UTF-8, so every response that
shows it fails) and NUL (PostgreSQL refuses it in text and JSON); and NaN or infinity in
free-form values (PostgreSQL's JSON refuses them too).

`UserInput` is the base of every request body (`scheduler.spec._Spec`, the API's request
models): one check over each field's raw input, keys and nested values included, that
names where the bad character is. A spec read back from the store (`context=STORED`) is
not checked; `repaired` makes such a value showable.
"""

from __future__ import annotations

import math
import re
from typing import Any, get_args

from pydantic import BaseModel, ValidationInfo, field_validator

SURROGATE = re.compile("[\ud800-\udfff]")
MAX_DEPTH = 32  # deeper input is refused by its own field's rules (or by the body limit)


def problem(value: Any, where: str = "", depth: int = 0) -> str | None:
    """Why `value` cannot be stored or shown (naming where inside it), or None."""
    if isinstance(value, str):
        if "\x00" in value:
            return f"{where or 'the value'} contains a NUL byte"
        if SURROGATE.search(value):
            return f"{where or 'the value'} contains a lone surrogate (not UTF-8 text)"
        return None
    if isinstance(value, float) and not math.isfinite(value):
        json = "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
        return f"{where or 'the value'} is {json}, not a finite number"
    if depth >= MAX_DEPTH:
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            at = f"{where}[{key!r}]" if where else repr(key)
            found = problem(key, f"the key {at}", depth + 1) or problem(item, at, depth + 1)
            if found:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = problem(item, f"{where}[{i}]" if where else f"item {i}", depth + 1)
            if found:
                return found
    return None


def repaired(value: Any) -> Any:
    """`value` with each lone surrogate replaced by U+FFFD (for showing a stored value)."""
    if isinstance(value, str):
        return SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {repaired(k): repaired(v) for k, v in value.items()}
    if isinstance(value, list):
        return [repaired(v) for v in value]
    return value


def has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(has_surrogate(k) or has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_surrogate(v) for v in value)
    return False


def _takes_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_takes_bool(a) for a in get_args(annotation))


class UserInput(BaseModel):
    """A request body: no field may hold a NUL, a lone surrogate or a non-finite number,
    and `true`/`false` only where a field takes a bool (`gpu: true` is no GPU count)."""

    @field_validator("*", mode="before")
    @classmethod
    def _storable(cls, value: Any, info: ValidationInfo) -> Any:
        if info.context == {"stored": True}:  # scheduler.spec.STORED: checked when submitted
            return value
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and not _takes_bool(field.annotation):
            raise ValueError(f"must be a number or text, not {str(value).lower()}")
        why = problem(value, (field and field.alias) or info.field_name or "")
        if why is not None:
            raise ValueError(why)
        return value
