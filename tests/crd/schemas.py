"""A jsonschema validator for a CRD's spec schema, as the API server would apply it.

OpenAPI v3.0 (what CRDs use) is closest to JSON Schema draft 4: boolean
`exclusiveMinimum`, and `nullable` / `x-kubernetes-*` extensions, which we emulate: a
nullable node also accepts null, and an int-or-string node accepts integers and
strings (so `cpu: 0.5` is refused by the API server: write "500m" or "0.5").
Structural schemas forbid unknown fields (pruning; `kubectl apply` refuses them with
field validation), so objects with `properties` get additionalProperties false.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema


def _to_draft4(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    node = copy.deepcopy(node)
    for key in ("properties",):
        if key in node:
            node[key] = {k: _to_draft4(v) for k, v in node[key].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            node[key] = _to_draft4(node[key])
    if node.get("type") == "object" and "properties" in node:
        node.setdefault("additionalProperties", False)
    if node.pop("x-kubernetes-int-or-string", False):
        node["type"] = ["integer", "string"]
    if node.pop("nullable", False) and isinstance(node.get("type"), str):
        node["type"] = [node["type"], "null"]
    for key in list(node):
        if key.startswith("x-kubernetes-"):
            del node[key]
    return node


def crd_validator(crd: dict[str, Any]) -> jsonschema.Draft4Validator:
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return jsonschema.Draft4Validator(_to_draft4(root["properties"]["spec"]))
