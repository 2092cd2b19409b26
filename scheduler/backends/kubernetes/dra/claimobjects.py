"""A worker's ResourceClaim and its allocation, as plain JSON dicts (pure).

Shoal writes a claim the way kube-scheduler's DRA plugin does, so that the kubelet, the
driver and kube-controller-manager treat it alike: the claim names the device class and
how much of a device it wants; its status gets the devices chosen (with the capacity
consumed on a device shared by capacity), a node selector for the node, and the pod in
`reservedFor`. The delete-protection finalizer is the one the plugin sets: the
resourceclaim controller lifts it once it has deallocated the claim, which it does when
the pod is done or gone, never before, so a device stays taken while a worker may hold it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.backends.kubernetes import dra, names

Obj = dict[str, Any]
GROUP = "resource.k8s.io/v1"
FINALIZER = "resource.kubernetes.io/delete-protection"
REQUEST = "gpu"  # the one request of a worker's claim, and the pod's claim entry


def claim(
    pod: Obj,
    *,
    device_class: str,
    count: int,
    capacity: Mapping[str, int] | None = None,
    selectors: Sequence[str] = (),
    gpu_index: int | None = None,
) -> Obj:
    """The claim of `pod` (named by its `shoal.dev/resource-claim` annotation), owned by
    the pod: the garbage collector deletes it once the pod is gone."""
    meta = pod["metadata"]
    ann = names.annotations_of(pod)
    exactly: Obj = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if capacity:
        exactly["capacity"] = {"requests": {k: str(v) for k, v in capacity.items()}}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    marks = {names.JOB_ID: ann.get(names.JOB_ID, ""), names.NODE: ann.get(names.NODE, "")}
    if gpu_index is not None:
        marks[names.GPU_INDEX] = str(gpu_index)
    labels = {
        k: v
        for k, v in names.labels_of(pod).items()
        if k in (names.JOB, names.QUEUE, names.MANAGED_BY, names.ATTEMPT)
    }
    return {
        "apiVersion": GROUP,
        "kind": "ResourceClaim",
        "metadata": {
            "name": ann[names.DRA_CLAIM],
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": marks,
            "finalizers": [FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"devices": {"requests": [{"name": REQUEST, "exactly": exactly}]}},
    }


def allocation(
    claim_obj: Obj,
    pod: Obj,
    node: str,
    devices: Sequence[tuple[str, tuple[str, str, str], Mapping[str, int] | None]],
) -> Obj:
    """The status that allocates `claim_obj` on `node` and reserves it for `pod`:
    `devices` are (request, (driver, pool, device), capacity consumed or None). A share
    of a device (capacity consumed) carries a share ID, as the API server requires."""
    results = []
    for request, (driver, pool, device), consumed in devices:
        r: Obj = {"request": request, "driver": driver, "pool": pool, "device": device}
        if consumed is not None:
            r["consumedCapacity"] = {k: str(v) for k, v in consumed.items()}
            r["shareID"] = claim_obj["metadata"]["uid"]
        results.append(r)
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    meta = pod["metadata"]
    return {
        "status": {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {"nodeSelectorTerms": [term]},
            },
            "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
        }
    }


def reserved_for(claim_obj: Obj, pod: Obj) -> bool:
    """Is `claim_obj` allocated and reserved for this very pod (its uid)?"""
    st = claim_obj.get("status") or {}
    uid = pod["metadata"].get("uid")
    return bool(st.get("allocation")) and any(
        r.get("uid") == uid for r in st.get("reservedFor") or []
    )


def owner_uid(claim_obj: Obj) -> str:
    """The uid of the pod that owns `claim_obj` ("" for none)."""
    refs = (claim_obj.get("metadata") or {}).get("ownerReferences") or []
    return next((str(r.get("uid", "")) for r in refs if r.get("kind") == "Pod"), "")


def allocated_devices(claim_obj: Obj) -> list[tuple[str, str, str]]:
    """The (driver, pool, device) keys `claim_obj`'s allocation names."""
    return [(str(r["driver"]), str(r["pool"]), str(r["device"])) for r in dra.results(claim_obj)]
