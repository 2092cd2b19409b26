"""What every spec model shares: the pydantic base (camelCase fields, frozen, no extra
keys), DNS-1123 names and the 32-bit priority."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from scheduler.spec.text import UserInput

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# Priorities are stored in 32-bit integer columns.
Priority = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]

Name = Annotated[str, Field(min_length=1, max_length=63, description="DNS-1123 label")]


def dns1123(value: str) -> str:
    """`value` if it is a DNS-1123 label; else a ValueError that says what one is."""
    if not DNS1123_LABEL.match(value):
        raise ValueError(
            "must be a DNS-1123 label: lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters"
        )
    return value


class SpecModel(UserInput):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,  # NaN/Infinity pass json.loads but are no quantity
    )
