"""Generates the TrainingJob and Queue CRDs from the pydantic specs in `scheduler.spec`,
so the API server, the REST API and the CLI validate the same fields the same way.

`python -m scheduler.controller.crdgen` writes deploy/crds/*.yaml and
helm/shoal/crds/*.yaml; tests/crd/ checks the committed files are what it generates.

The schema conversion is `crdschema`'s, the status schemas `crdstatus`'s.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from scheduler.controller.crdschema import spec_schema
from scheduler.controller.crdstatus import QUEUE_STATUS, TRAININGJOB_STATUS
from scheduler.spec import JobSpec
from scheduler.spec.queue import QueueSpec

GROUP = "shoal.dev"
VERSION = "v1alpha1"
ROOT = Path(__file__).resolve().parents[2]
OUTPUT_DIRS = (ROOT / "deploy" / "crds", ROOT / "helm" / "shoal" / "crds")
# A job's spec is immutable once submitted (as a Pod's is): the API server refuses an
# edit with this message rather than the controller noting it after the fact.
IMMUTABLE_SPEC = {
    "rule": "self == oldSelf",
    "message": "spec is immutable: delete and re-create the TrainingJob to change it",
}


# `workers` is a count or {min, max}, which no structural schema types: the API server
# keeps it as given, and checks what a schema without a type can (bounds of a count,
# the range's fields); Shoal's controller checks the rest (min <= max, no text).
_BOUND = {"type": "integer", "minimum": 1, "maximum": 4096}
WORKERS = {
    "description": "how many workers (1-4096); {min, max}: an elastic PyTorch job "
    "(torchrun --nnodes=min:max) that Shoal sizes between the two",
    "x-kubernetes-preserve-unknown-fields": True,
    "minimum": 1,
    "maximum": 4096,
    "properties": {"min": _BOUND, "max": _BOUND},
    "required": ["min", "max"],
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
    # metadata.name and .namespace are the job's, so the spec has neither of its own.
    spec = spec_schema(
        JobSpec,
        "What the job runs and what each worker needs (scheduler.spec.JobSpec)",
        drop=("name", "namespace"),
    )
    spec["properties"]["workers"] = WORKERS
    return _crd(
        kind="TrainingJob",
        plural="trainingjobs",
        short=["tj"],
        scope="Namespaced",
        spec=spec,
        status=TRAININGJOB_STATUS,
        validations=[IMMUTABLE_SPEC],
        columns=[
            _column("Queue", ".spec.queue"),
            _column("Workers", ".status.workers", "integer"),
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
