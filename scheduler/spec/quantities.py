"""Kubernetes resource quantities ("80Gi", "1.5G", "500m", "1e3"): the one parser, exact.

Every reader of a quantity goes through `parse_quantity`: a job spec's CPU and memory
(whole millicores and MiB), a node's allocatable and a pod's requests (the kubernetes backend),
and DRA capacities and counters (exact bytes, whatever suffix the driver chose). The
grammar is k8s.io/apimachinery's resource.Quantity: a sign, a decimal number, and a
binary SI (Ki … Ei), decimal SI (n … E) or exponent (e3, E-3) suffix.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

_QUANTITY = re.compile(
    r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_MAX_EXPONENT = 40  # "1e999999" must not make a number nobody can hold
MIB = 1024 * 1024

# A job spec's bounds (its validators): larger numbers are typos that overflow columns.
MAX_CPU_MILLI = 10**9
MAX_MEMORY_MIB = 1024**3  # 1Pi


def parse_quantity(value: str | int | float) -> Fraction:
    """The exact value of a quantity; ValueError naming the text when it is not one."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a quantity")
        return Fraction(repr(value))
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)  # a cluster's pods ask the same few quantities
def _parse_text(value: str) -> Fraction:
    m = _QUANTITY.match(value.strip())
    if not m:
        raise ValueError(f"{value[:40]!r} is not a quantity such as 80Gi, 1.5G or 500m")
    sign, number, suffix = m.groups()
    n = Fraction(number)
    if suffix in _BINARY:
        n *= 1024 ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        n *= Fraction(10) ** _DECIMAL[suffix]
    elif suffix:  # an exponent: "1e3", "5E-3"
        exponent = int(suffix[1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(f"{value[:40]!r} has too large an exponent")
        n *= Fraction(10) ** exponent
    return -n if sign == "-" else n


def quantity_int(value: str | int | float) -> int:
    """Whole base units, rounded up as Quantity.Value() does ("1.5" -> 2, "100m" -> 1)."""
    return math.ceil(parse_quantity(value))


def parse_memory_mib(value: str | int) -> int:
    """'16Gi' -> 16384, whole MiB rounded down; a bare number is bytes."""
    try:
        return math.floor(parse_quantity(value) / MIB)
    except ValueError:
        what = str(value)[:40]
        raise ValueError(f"{what!r} is not a memory quantity such as 512Mi or 16Gi") from None


def parse_cpu_milli(value: str | float) -> int:
    """'500m' -> 500, 2 -> 2000; rounded up to a whole millicore as MilliValue() does."""
    try:
        return math.ceil(parse_quantity(value) * 1000)
    except ValueError:
        raise ValueError(f"{str(value)[:40]!r} is not a CPU quantity such as 500m or 2") from None
