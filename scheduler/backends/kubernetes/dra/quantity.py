"""Kubernetes resource quantities ("80Gi", "1.5G", "100m", "1e3") as exact numbers.

`scheduler.spec.quantities` reads CPU and memory into MiB and millicores with floats and
sanity bounds for job specs; DRA capacities and counters need the exact count of base
units (bytes), whatever suffix the driver chose, so they are parsed here with Fractions.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

# <sign><digits>[.<digits>]<suffix>, suffix one of the binary SI, decimal SI or exponent
# forms of k8s.io/apimachinery/pkg/api/resource.
_QUANTITY = re.compile(
    r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_MAX_EXPONENT = 40  # "1e999999" must not make a number nobody can hold


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
