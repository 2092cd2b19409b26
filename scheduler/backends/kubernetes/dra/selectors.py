"""CEL device selectors of DeviceClasses and claim requests, evaluated with celpy.

A device matches when every selector is true. As in Kubernetes, an expression that fails
on a device (most often: it reads an attribute the device does not have) is no match,
and the failure is reported rather than raised: one odd device or one careless class
must not stop a scheduling cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError, base_functions

from scheduler.backends.kubernetes.dra.celenv import FUNCTIONS, activation
from scheduler.backends.kubernetes.dra.devices import Device

Obj = dict[str, Any]
_MACROS = frozenset({"has", "all", "exists", "exists_one", "map", "filter"})
_KNOWN = _MACROS | set(base_functions) | set(FUNCTIONS)
_HINT = "; guard optional attributes with has() or `in`"
_ENV = celpy.Environment()


class SelectorError(ValueError):
    """A selector that cannot be compiled: the message names the expression and why."""


@lru_cache(maxsize=1024)
def _program(expression: str) -> celpy.Runner:
    # Cached by text: every claim of a kind carries the same expressions.
    try:
        ast = _ENV.compile(expression)
    except Exception as e:  # CELParseError, and lark's own errors on odd input
        line, column = getattr(e, "line", None), getattr(e, "column", None)
        where = f"syntax error at line {line}, column {column}" if line else type(e).__name__
        raise SelectorError(f"selector {expression!r} does not compile: {where}") from None
    # celpy has no type checker: an unknown function would only fail on evaluation,
    # where Kubernetes refuses it up front. Refuse it here too.
    for node in ast.iter_subtrees():
        if node.data in ("ident_arg", "member_dot_arg"):
            name = next(str(c) for c in node.children if not hasattr(c, "data"))
            if name not in _KNOWN:
                raise SelectorError(
                    f"selector {expression!r} does not compile: unknown function {name}()"
                )
    return _ENV.program(ast, functions=FUNCTIONS)


def _evaluate(expression: str, device: Device) -> str | None:
    """None if the expression is true for the device, else why not."""
    try:
        result = _program(expression).evaluate(activation(device))
    except CELEvalError as e:
        return _failed(expression, device, e)
    except Exception as e:  # celpy raises plain Python errors on some ill-typed input
        return _failed(expression, device, e)
    if isinstance(result, CELEvalError):
        return _failed(expression, device, result)
    if not isinstance(result, celtypes.BoolType):
        return f"selector {expression!r} gave {type(result).__name__}, not bool, on {_name(device)}"
    return None if result else f"selector {expression!r} is false for {_name(device)}"


def _name(device: Device) -> str:
    return f"device {device.driver}/{device.pool}/{device.name}"


def _failed(expression: str, device: Device, error: Exception) -> str:
    message = str(error.args[0]) if error.args else type(error).__name__
    hint = _HINT if "no such" in message and ("member" in message or "key" in message) else ""
    return f"selector {expression!r} failed on {_name(device)}: {message}{hint}"


def _expressions(selectors: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    out = []
    for i, s in enumerate(selectors):
        expression = (s.get("cel") or {}).get("expression")
        if not isinstance(expression, str) or not expression.strip():
            raise SelectorError(f"selector {i} has no cel.expression")
        out.append(expression)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Selector:
    """A conjunction of compiled CEL expressions."""

    expressions: tuple[str, ...] = ()

    def explain(self, device: Device) -> str | None:
        """None if the device matches every expression, else the first reason it does not."""
        for expression in self.expressions:
            why = _evaluate(expression, device)
            if why is not None:
                return why
        return None

    def matches(self, device: Device) -> bool:
        return self.explain(device) is None


def compile_selectors(selectors: Iterable[Mapping[str, Any]]) -> Selector:
    """Compile `[{"cel": {"expression": ...}}, ...]`; SelectorError on the first bad one."""
    expressions = _expressions(selectors)
    for expression in expressions:
        _program(expression)
    return Selector(expressions)


@dataclass(frozen=True, slots=True)
class _Class:
    name: str
    version: str  # metadata.resourceVersion: a new one means the selectors may differ
    selector: Selector | None  # None: it does not compile (see error)
    error: str | None
    extended_resource: str | None


class DeviceClasses:
    """DeviceClass objects by name, with their selectors compiled once and what each
    class matched remembered per device, so a cycle re-asks without re-evaluating.
    Not thread-safe: its owner serialises update() and the questions."""

    def __init__(self, objects: Iterable[Obj] = ()) -> None:
        self._classes: dict[str, _Class] = {}
        self._seen: dict[tuple[str, tuple[str, ...], Device], str | None] = {}
        self.update(objects)

    def update(self, objects: Iterable[Obj]) -> None:
        """Take the classes as they are now; a class whose resourceVersion did not move
        keeps its compiled selectors and the answers it gave."""
        old = self._classes
        self._classes = {}
        for obj in objects:
            c = self._read(obj, old)
            self._classes[c.name] = c
        kept = {n for n, c in self._classes.items() if old.get(n) is c}
        self._seen = {k: v for k, v in self._seen.items() if k[0] in kept}

    @staticmethod
    def _read(obj: Obj, old: Mapping[str, _Class]) -> _Class:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        name, version = meta.get("name", ""), meta.get("resourceVersion", "")
        before = old.get(name)
        if before is not None and version and before.version == version:
            return before
        selector, error = None, None
        try:
            selector = compile_selectors(spec.get("selectors") or ())
        except SelectorError as e:
            error = f"DeviceClass {name}: {e}"
        return _Class(name, version, selector, error, spec.get("extendedResourceName"))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._classes))

    @property
    def errors(self) -> Mapping[str, str]:
        """Classes whose selectors do not compile (they match nothing)."""
        return {n: c.error for n, c in self._classes.items() if c.error}

    def by_extended_resource(self, resource: str) -> str | None:
        """The class standing for an extended resource such as nvidia.com/gpu (1.34+);
        the alphabetically first when several claim it, so the answer is stable."""
        return next(
            (n for n in sorted(self._classes) if self._classes[n].extended_resource == resource),
            None,
        )

    def explain(
        self, class_name: str, device: Device, extra_selectors: Sequence[Mapping[str, Any]] = ()
    ) -> str | None:
        """None if the device is of the class and meets the request's own selectors, else
        why not. SelectorError if the request's selectors do not compile."""
        c = self._classes.get(class_name)
        if c is None:
            return f"no DeviceClass {class_name}"
        if c.selector is None:
            return c.error
        extra = _expressions(extra_selectors)
        key = (class_name, extra, device)
        if key not in self._seen:
            if len(self._seen) > 100_000:  # devices come and go: forget, never grow forever
                self._seen.clear()
            why = c.selector.explain(device)
            if why is None:
                why = compile_selectors(extra_selectors).explain(device)
            self._seen[key] = why
        return self._seen[key]

    def matches(
        self, class_name: str, device: Device, extra_selectors: Sequence[Mapping[str, Any]] = ()
    ) -> bool:
        return self.explain(class_name, device, extra_selectors) is None
