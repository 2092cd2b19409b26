"""Idempotent writes of a job's Kubernetes objects: create-or-adopt, delete, annotate.

Objects have deterministic names, so a create that meets 409 AlreadyExists on an object
Shoal made for the same job is a success (a crash interrupted the launch that made it).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.client.api import Kube
from scheduler.backends.kubernetes.client.apierrors import ApiError

log = logging.getLogger(__name__)
Obj = dict[str, Any]


def graceful(grace_period_s: float) -> int:
    """The `gracePeriodSeconds` of a delete: whole seconds, rounded up, at least 1. Never
    0, which is a force delete: the API server forgets the pod at once while its
    containers may still run and hold their GPUs on the node."""
    return max(1, math.ceil(grace_period_s))


def ensure(kube: Kube, resource: str, body: Obj, job_id: str) -> Obj:
    """Create `body`; if it exists and Shoal made it for this job, that is success."""
    meta = body["metadata"]
    try:
        return kube.create(resource, body, meta["namespace"])
    except ApiError as e:
        if e.status != 409:
            raise
    found = kube.get(resource, meta["name"], meta["namespace"])
    if found is None:
        return kube.create(resource, body, meta["namespace"])
    if not names.is_managed(found) or names.annotations_of(found).get(names.JOB_ID) != job_id:
        raise ApiError(
            409,
            "Conflict",
            f"{resource} {meta['namespace']}/{meta['name']} exists and does not belong to this job",
        )
    return found


def delete_job_objects(kube: Kube, namespace: str, job_id: str, *, gangs: bool = False) -> None:
    """Delete the Services and ConfigMaps Shoal made for `job_id` (its pods go apart),
    and with `gangs` its Workloads and PodGroups."""
    selector = f"{names.JOB}={names.label_value(job_id)},{names.MANAGED_BY}={names.SHOAL}"
    kinds = ("services", "configmaps", *(("workloads", "podgroups") if gangs else ()))
    for resource in kinds:
        items, _ = kube.list(resource, namespace, labels=selector)
        for obj in items:
            if names.annotations_of(obj).get(names.JOB_ID) == job_id:
                kube.delete(resource, obj["metadata"]["name"], namespace)


def patch_quietly(kube: Kube, pod: Obj, ann: dict[str, str]) -> None:
    """Annotate `pod`, logging a refusal: the signal is a courtesy, deletion counts."""
    try:
        kube.patch(
            "pods",
            pod["metadata"]["name"],
            {"metadata": {"annotations": ann}},
            pod["metadata"]["namespace"],
        )
    except ApiError as e:
        log.info("could not annotate %s: %s", pod["metadata"]["name"], e)
