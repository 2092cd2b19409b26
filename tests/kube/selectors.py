"""Label and field selectors, as the fake API server evaluates them.

Supports the forms Shoal uses: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, comma-
separated (AND); field selectors on dotted paths (`spec.nodeName=n1`, `status.phase!=x`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_IN = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split(selector: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def _term(term: str, get: Any) -> bool:
    m = _IN.match(term)
    if m:
        values = {v.strip() for v in m.group(3).split(",")}
        present = get(m.group(1))
        return (present in values) == (m.group(2) == "in")
    if "!=" in term:
        k, v = term.split("!=", 1)
        return bool(get(k.strip()) != v.strip())
    if "=" in term:
        k, v = term.replace("==", "=").split("=", 1)
        return bool(get(k.strip()) == v.strip())
    if term.startswith("!"):
        return get(term[1:].strip()) is None
    return get(term) is not None


def labels_match(selector: str, labels: Mapping[str, str]) -> bool:
    return all(_term(t, labels.get) for t in _split(selector))


def fields_match(selector: str, obj: Mapping[str, Any]) -> bool:
    def get(path: str) -> Any:
        cur: Any = obj
        for part in path.split("."):
            cur = cur.get(part) if isinstance(cur, Mapping) else None
        return "" if cur is None else str(cur)

    return all(_term(t, get) for t in _split(selector))
