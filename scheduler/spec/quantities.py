"""Kubernetes quantities of CPU and memory ("500m", "16Gi") as whole millicores and MiB,
with the bounds beyond which a number is a typo that would overflow a column."""

from __future__ import annotations

import math
import re

MEMORY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|K|M|G|T)?$")
_MIB_PER_UNIT = {
    None: 1 / (1024 * 1024),
    "Ki": 1 / 1024,
    "K": 1000 / (1024 * 1024),
    "Mi": 1.0,
    "M": 1e6 / (1024 * 1024),
    "Gi": 1024.0,
    "G": 1e9 / (1024 * 1024),
    "Ti": 1024.0 * 1024,
    "T": 1e12 / (1024 * 1024),
}

MAX_CPU_MILLI = 10**9  # sanity bounds: larger numbers are typos and overflow columns
MAX_MEMORY_MIB = 1024**3


def parse_memory_mib(value: str | int) -> int:
    """'16Gi' -> 16384; a bare number is bytes, as in Kubernetes quantities."""
    if isinstance(value, int):
        return value // (1024 * 1024)
    m = MEMORY.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a memory quantity such as 512Mi or 16Gi")
    mib = float(m.group(1)) * _MIB_PER_UNIT[m.group(2)]
    if not math.isfinite(mib) or mib > MAX_MEMORY_MIB * 1024:
        raise ValueError(f"{value[:40]!r} is too large a memory quantity (at most 1Pi)")
    return int(mib)


def parse_cpu_milli(value: str | float) -> int:
    """'500m' -> 500, 2 -> 2000."""
    if isinstance(value, (int, float)):
        if not math.isfinite(value * 1000):
            raise ValueError(f"{value!r} is not a CPU quantity such as 500m or 2")
        return round(value * 1000)
    v = value.strip()
    if v.endswith("m") and v[:-1].isdigit():
        return int(v[:-1])
    try:
        return round(float(v) * 1000)
    except (ValueError, OverflowError):
        raise ValueError(f"{value!r} is not a CPU quantity such as 500m or 2") from None
