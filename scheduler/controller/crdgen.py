"""Generates the TrainingJob and Queue CRDs from the pydantic specs in `scheduler.spec`,
so the API server, the REST API and the CLI validate the same fields the same way.

`python -m scheduler.controller.crdgen` writes deploy/crds/*.yaml and
helm/shoal/crds/*.yaml; tests/crd/ checks the committed files are what it generates.

A pydantic JSON schema is not a Kubernetes structural schema: `$ref`s are inlined,
`anyOf [X, null]` becomes X with `nullable: true`, unions of scalar types
(`cpu: "500m" | 2`) become `x-kubernetes-int-or-string`, open maps
(`QuotaSpec`'s per-model keys) become `additionalProperties`, and keywords
apiextensions/v1 rejects (`title`, `default: null`, `$defs`) are dropped.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from scheduler.spec import DNS1123_LABEL, JobSpec, QueueSpec

GROUP = "shoal.dev"
VERSION = "v1alpha1"
ROOT = Path(__file__).resolve().parents[2]
OUTPUT_DIRS = (ROOT / "deploy" / "crds", ROOT / "helm" / "shoal" / "crds")

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
MESSAGE_MAX = 32768  # metav1.Condition's message limit
# A job's spec is immutable once submitted (as a Pod's is): the API server refuses an
# edit with this message rather than the controller noting it after the fact.
IMMUTABLE_SPEC = {
    "rule": "self == oldSelf",
    "message": "spec is immutable: delete and re-create the TrainingJob to change it",
}


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
    any_of = node.pop("anyOf", None)
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
        else:  # pragma: no cover - no such field today; keep the API server lenient
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


# metav1.Condition, field for field (what `kubectl wait --for=condition=...` and
# controller tooling expect): all but observedGeneration required.
_CONDITION = {
    "type": "object",
    "required": ["type", "status", "reason", "message", "lastTransitionTime"],
    "properties": {
        "type": {
            "type": "string",
            "maxLength": 316,
            "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        },
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "reason": {
            "type": "string",
            "minLength": 1,
            "maxLength": 1024,
            "pattern": r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        },
        "message": {"type": "string", "maxLength": MESSAGE_MAX},
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
    },
}
_CONDITIONS = {
    "type": "array",
    "items": _CONDITION,
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}

TRAININGJOB_STATUS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "jobId": {"type": "string", "description": "The job's id in Shoal's store"},
        "phase": {
            "type": "string",
            "enum": [
                "Pending",
                "Scheduled",
                "Running",
                "Succeeded",
                "Failed",
                "Preempted",
                "Cancelled",
                "Invalid",
            ],
        },
        "reason": {"type": "string", "description": "Why the job is pending, in words"},
        "queue": {"type": "string"},
        "workers": {"type": "integer"},
        "gpus": {"type": "string", "description": "GPUs held in all, e.g. '2' or '0.5'"},
        "attempt": {"type": "integer"},
        "restarts": {"type": "integer"},
        "observedGeneration": {"type": "integer"},
        "submittedAt": {"type": "string", "format": "date-time"},
        "startedAt": {"type": "string", "format": "date-time"},
        "finishedAt": {"type": "string", "format": "date-time"},
        "placements": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "worker": {"type": "integer"},
                    "node": {"type": "string"},
                    "gpus": {"type": "array", "items": {"type": "integer"}},
                    "fraction": {"type": "number"},
                    "enforcement": {"type": "string"},
                },
            },
        },
        "conditions": _CONDITIONS,
    },
}

QUEUE_STATUS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "allocated": {"type": "number", "description": "GPUs its jobs hold now"},
        "pending": {"type": "integer", "description": "Jobs waiting"},
        "running": {"type": "integer"},
        "fairShare": {"type": "number", "description": "GPUs its fair share comes to now"},
        "observedGeneration": {"type": "integer"},
        "conditions": _CONDITIONS,
    },
}


def _column(name: str, path: str, kind: str = "string", **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, "jsonPath": path, **extra}


def _crd(
    *,
    kind: str,
    plural: str,
    short: list[str],
    scope: str,
    spec: dict[str, Any],
    status: dict[str, Any],
    columns: list[dict[str, Any]],
    validations: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    if validations:  # CEL rules on the spec (x-kubernetes-validations)
        spec = {**spec, "x-kubernetes-validations": validations}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "shoal", "app.kubernetes.io/part-of": "shoal"},
        },
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short,
                "categories": ["shoal"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def trainingjob_crd() -> dict[str, Any]:
    # metadata.name is the job's name, so the spec has no `name` of its own.
    return _crd(
        kind="TrainingJob",
        plural="trainingjobs",
        short=["tj"],
        scope="Namespaced",
        spec=spec_schema(
            JobSpec,
            "What the job runs and what each worker needs (scheduler.spec.JobSpec)",
            drop=("name",),
        ),
        status=TRAININGJOB_STATUS,
        validations=[IMMUTABLE_SPEC],
        columns=[
            _column("Queue", ".spec.queue"),
            _column("Workers", ".spec.workers", "integer"),
            _column("GPUs", ".status.gpus"),
            _column("Phase", ".status.phase"),
            _column("Reason", ".status.reason", priority=1),
            _column("Age", ".metadata.creationTimestamp", "date"),
        ],
    )


def queue_crd() -> dict[str, Any]:
    return _crd(
        kind="Queue",
        plural="queues",
        short=["sq"],
        scope="Cluster",
        spec=spec_schema(
            QueueSpec,
            "GPU guarantees, limits, weight and priority (scheduler.spec.QueueSpec)",
            drop=("name",),
        ),
        status=QUEUE_STATUS,
        columns=[
            _column("Parent", ".spec.parent"),
            _column("Guaranteed", ".spec.guaranteed.total", "number"),
            _column("Limit", ".spec.limit.total", "number"),
            _column("Allocated", ".status.allocated", "number"),
            _column("FairShare", ".status.fairShare", "number"),
            _column("Pending", ".status.pending", "integer"),
            _column("Age", ".metadata.creationTimestamp", "date"),
        ],
    )


def render() -> dict[str, str]:
    """File name -> YAML text of every CRD."""
    header = "# Generated by `python -m scheduler.controller.crdgen` from scheduler/spec.py.\n"
    out = {}
    for crd in (trainingjob_crd(), queue_crd()):
        name = crd["metadata"]["name"]
        out[f"{name}.yaml"] = header + yaml.safe_dump(crd, sort_keys=False, width=100)
    return out


def main(argv: list[str] | None = None) -> int:
    for directory in OUTPUT_DIRS:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in render().items():
            (directory / name).write_text(text)
            print(f"wrote {directory.relative_to(ROOT) / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
