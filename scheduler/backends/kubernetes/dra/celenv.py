"""The CEL environment of DRA selectors, on cel-python (`celpy`).

Kubernetes evaluates `spec.selectors[].cel.expression` with one variable, `device`
(driver, attributes, capacity, allowMultipleAllocations), plus its own libraries; real
DeviceClasses use the quantity library (`quantity("40Gi")`, `.compareTo()`,
`.isGreaterThan()`, `.asInteger()`) on capacities and the semver library on `version`
attributes. celpy has neither type, so both are small Python types here, and their
functions are registered by name: celpy calls a method `x.f(y)` as `f(x, y)`, which is
why each method dispatches on the type of its first argument.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from functools import total_ordering
from typing import Any

from celpy import celtypes
from celpy.evaluation import CELEvalError

from scheduler.backends.kubernetes.dra.devices import Device, Version, split_qualified
from scheduler.spec.quantities import parse_quantity

_INT64 = 2**63


class Quantity:
    """A Kubernetes quantity in CEL: compared by value, so 1Gi == 1024Mi."""

    __slots__ = ("value",)

    def __init__(self, value: Fraction) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"quantity({self.value})"


_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)


@total_ordering
class Semver:
    """A semantic version; build metadata is ignored and a pre-release sorts first."""

    __slots__ = ("major", "minor", "patch", "pre")

    def __init__(self, text: str) -> None:
        m = _SEMVER.match(text)
        if not m:
            raise ValueError(f"{text[:40]!r} is not a semantic version such as 1.2.3")
        self.major, self.minor, self.patch = (int(m.group(i)) for i in (1, 2, 3))
        self.pre = tuple(m.group(4).split(".")) if m.group(4) else ()

    def _key(self) -> tuple[Any, ...]:
        # Numeric identifiers sort below alphanumeric ones; no pre-release sorts last.
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, not self.pre, pre)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self._key() == other._key()

    def __lt__(self, other: Semver) -> bool:
        return bool(self._key() < other._key())

    def __hash__(self) -> int:
        return hash(self._key())


def _error(message: str) -> CELEvalError:
    return CELEvalError(message)


def _quantity(text: Any) -> Any:
    try:
        return Quantity(parse_quantity(str(text)))
    except ValueError as e:
        return _error(f"quantity: {e}")


def _semver(text: Any, normalize: Any = False) -> Any:
    text = str(text)
    if normalize:  # "v1.2" -> "1.2.0", as the Kubernetes library's normalize argument
        core, sep, rest = text.removeprefix("v").partition("-")
        text = core + ".0" * max(0, 2 - core.count(".")) + sep + rest
    try:
        return Semver(text)
    except ValueError as e:
        return _error(f"semver: {e}")


def _is(parse: Callable[[Any], Any]) -> Callable[[Any], celtypes.BoolType]:
    return lambda text: celtypes.BoolType(not isinstance(parse(text), CELEvalError))


def _compare(a: Any, b: Any) -> int | CELEvalError:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.value > b.value) - (a.value < b.value)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return (a > b) - (a < b)
    return _error(f"no such overload: compare {type(a).__name__} with {type(b).__name__}")


def _cmp(test: Callable[[int], bool]) -> Callable[[Any, Any], Any]:
    def method(a: Any, b: Any) -> Any:
        c = _compare(a, b)
        return c if isinstance(c, CELEvalError) else celtypes.BoolType(test(c))

    return method


def _compare_to(a: Any, b: Any) -> Any:
    c = _compare(a, b)
    return c if isinstance(c, CELEvalError) else celtypes.IntType(c)


def _quantity_only(fn: Callable[[Fraction], Any], name: str) -> Callable[[Any], Any]:
    def method(q: Any) -> Any:
        if not isinstance(q, Quantity):
            return _error(f"no such overload: {name}() on {type(q).__name__}")
        return fn(q.value)

    return method


def _as_integer(v: Fraction) -> Any:
    if v.denominator != 1 or not -_INT64 <= v < _INT64:
        return _error(f"cannot convert value {v} to integer")
    return celtypes.IntType(int(v))


def _arith(sign: int) -> Callable[[Any, Any], Any]:
    def method(q: Any, other: Any) -> Any:
        if isinstance(other, Quantity):
            other = other.value
        elif isinstance(other, int) and not isinstance(other, bool):
            other = Fraction(other)
        elif isinstance(other, str):  # the library accepts a quantity string too
            other = _quantity(other)
            if isinstance(other, CELEvalError):
                return other
            other = other.value
        if not isinstance(q, Quantity) or not isinstance(other, Fraction):
            return _error("no such overload: add/sub takes a quantity and a quantity or int")
        return Quantity(q.value + sign * other)

    return method


def _semver_part(index: int, name: str) -> Callable[[Any], Any]:
    def method(v: Any) -> Any:
        if not isinstance(v, Semver):
            return _error(f"no such overload: {name}() on {type(v).__name__}")
        return celtypes.IntType((v.major, v.minor, v.patch)[index])

    return method


FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity,
    "isQuantity": _is(_quantity),
    "semver": _semver,
    "isSemver": _is(_semver),
    "compareTo": _compare_to,
    "isGreaterThan": _cmp(lambda c: c > 0),
    "isLessThan": _cmp(lambda c: c < 0),
    "sign": _quantity_only(lambda v: celtypes.IntType((v > 0) - (v < 0)), "sign"),
    "isInteger": _quantity_only(
        lambda v: celtypes.BoolType(not isinstance(_as_integer(v), CELEvalError)),
        "isInteger",
    ),
    "asInteger": _quantity_only(_as_integer, "asInteger"),
    "asApproximateFloat": _quantity_only(lambda v: celtypes.DoubleType(float(v)), "asFloat"),
    "add": _arith(1),
    "sub": _arith(-1),
    "major": _semver_part(0, "major"),
    "minor": _semver_part(1, "minor"),
    "patch": _semver_part(2, "patch"),
}


class DomainMap(celtypes.MapType):
    """device.attributes / device.capacity: an unknown domain is an empty map, as in
    Kubernetes, so only a missing attribute *name* is an error."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType()


def _value(v: object) -> Any:
    if isinstance(v, bool):
        return celtypes.BoolType(v)
    if isinstance(v, int):
        return celtypes.IntType(v)
    if isinstance(v, Version):
        try:
            return Semver(v)
        except ValueError:
            return celtypes.StringType(v)  # the API server would have refused it
    if isinstance(v, str):
        return celtypes.StringType(v)
    if isinstance(v, tuple):
        return celtypes.ListType([_value(x) for x in v])
    return v


def _by_domain(values: dict[str, Any], wrap: Callable[[Any], Any]) -> DomainMap:
    out: dict[Any, Any] = {}
    for name, v in values.items():
        domain, ident = split_qualified(name)
        out.setdefault(celtypes.StringType(domain), celtypes.MapType())[
            celtypes.StringType(ident)
        ] = wrap(v)
    return DomainMap(out)


def activation(device: Device) -> dict[str, Any]:
    """The variables a selector sees for `device`."""
    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(device.driver),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(device.multiple),
                celtypes.StringType("attributes"): _by_domain(dict(device.attributes), _value),
                celtypes.StringType("capacity"): _by_domain(
                    dict(device.capacity), lambda v: Quantity(Fraction(v))
                ),
            }
        )
    }
