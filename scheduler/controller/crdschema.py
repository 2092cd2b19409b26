"""A pydantic JSON schema turned into a Kubernetes structural schema (for the CRDs).

`$ref`s are inlined, `anyOf [X, null]` becomes X with `nullable: true`, unions of
scalar types (`cpu: "500m" | 2`) become `x-kubernetes-int-or-string`, open maps
(`QuotaSpec`'s per-model keys) become `additionalProperties`, and keywords
apiextensions/v1 rejects (`title`, `default: null`, `$defs`) are dropped.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from scheduler.spec.common import DNS1123_LABEL

# Keywords apiextensions.k8s.io/v1 accepts in a structural schema (subset we emit).
_KEEP = {
    "type",
    "description",
    "properties",
    "required",
    "items",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "additionalProperties",
    "default",
    "nullable",
    "format",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
}
_NAME_PATTERN = DNS1123_LABEL.pattern


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    """Inline every `#/$defs/X` reference (the specs have no recursive models)."""
    if isinstance(node, dict):
        if "$ref" in node:
            target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return _resolve({**target, **rest}, defs)
        return {k: _resolve(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, defs) for v in node]
    return node


def _structural(node: dict[str, Any]) -> dict[str, Any]:
    """One pydantic schema node -> one structural-schema node."""
    node = dict(node)
    any_of = node.pop("anyOf", None) or node.pop("oneOf", None)
    if any_of is not None:
        options = [o for o in any_of if o.get("type") != "null"]
        if len(options) < len(any_of):
            node["nullable"] = True
            if node.get("default", 0) is None:
                del node["default"]
        types = {o.get("type") for o in options}
        if len(options) == 1:
            node = {**options[0], **node}
        elif types <= {"string", "number", "integer"}:
            # CPU quantities: "500m" or 2. Kubernetes' own quantity fields do the same.
            node["x-kubernetes-int-or-string"] = True
        else:  # `workers`: a count or {min, max}; Shoal's own validation checks it
            node["x-kubernetes-preserve-unknown-fields"] = True
    if node.get("type") == "object":
        props = node.get("properties", {})
        extra = node.get("additionalProperties")
        if extra is True:
            # Open maps (`guaranteed: {total: 8, H100: 4}`): extra keys are GPU models,
            # each a number >= 0 (QuotaSpec's own check); structural schemas cannot mix
            # properties and additionalProperties, so the named keys join the map's type.
            node["additionalProperties"] = {"type": "number", "minimum": 0}
            # A CR always writes the map (the REST API also takes a bare number).
            node["description"] = "GPUs in total and per GPU model, e.g. {total: 8, H100: 4}"
            node.pop("properties", None)
            props = {}
        elif extra is False:
            del node["additionalProperties"]  # the default for structural schemas
        elif isinstance(extra, dict):
            node["additionalProperties"] = _structural(extra)
        if props:
            node["properties"] = {k: _structural(v) for k, v in props.items()}
    if "items" in node:
        node["items"] = _structural(node["items"])
    for bound, strict in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        # JSON Schema 2020 has numeric exclusive bounds; OpenAPI v3.0 (and so the API
        # server) a number plus a boolean flag.
        if isinstance(node.get(strict), (int, float)) and not isinstance(node[strict], bool):
            node[bound], node[strict] = node[strict], True
    if node.get("description") == "DNS-1123 label" and node.get("type") == "string":
        node["pattern"] = _NAME_PATTERN
    return {k: v for k, v in node.items() if k in _KEEP}


def spec_schema(
    model: type[BaseModel], description: str, *, drop: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of `model`, without the fields in `drop`."""
    raw = model.model_json_schema(by_alias=True)
    resolved = _resolve({k: v for k, v in raw.items() if k != "$defs"}, raw.get("$defs", {}))
    for name in drop:
        resolved["properties"].pop(name, None)
        resolved["required"] = [r for r in resolved.get("required", []) if r != name]
    if not resolved.get("required"):
        resolved.pop("required", None)
    schema = _structural(resolved)
    schema["description"] = description
    return schema
