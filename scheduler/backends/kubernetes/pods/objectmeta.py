"""What every object of a job carries: labels, annotations and owner references.

Shared by the manifests of a launch (`manifests`, `workerpod`); pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.backends import base
from scheduler.backends.kubernetes import names
from scheduler.model import EPS, WorkerPlacement
from scheduler.spec import TRAININGJOB

Obj = dict[str, Any]


def is_fractional(p: WorkerPlacement) -> bool:
    return len(p.gpus) == 1 and p.fraction < 1 - EPS


def owner_refs(req: base.LaunchRequest, ns: str) -> list[Obj]:
    """The TrainingJob the job was submitted as, when it can own objects in `ns` (it has
    a uid, and owner references cannot cross namespaces)."""
    owner = req.owner
    if owner is None or owner.kind != TRAININGJOB or not owner.uid or owner.namespace != ns:
        return []
    return [
        {
            "apiVersion": "shoal.dev/v1alpha1",
            "kind": owner.kind,
            "name": owner.name,
            "uid": owner.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def job_labels(req: base.LaunchRequest, base_name: str, component: str) -> dict[str, str]:
    return {
        names.NAME: "shoal",
        names.INSTANCE: base_name,
        names.COMPONENT: component,
        names.MANAGED_BY: names.SHOAL,
        names.JOB: names.label_value(req.job_id),
        names.QUEUE: req.spec.queue,
        names.ATTEMPT: str(req.attempt),
    }


def object_meta(
    name: str,
    ns: str,
    labels: Mapping[str, str],
    req: base.LaunchRequest,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": ns,
        "labels": dict(labels),
        "annotations": {names.JOB_ID: req.job_id, **(annotations or {})},
    }
    if refs := owner_refs(req, ns):
        meta["ownerReferences"] = refs
    return meta
