"""Deterministic object names, and the labels and annotations Shoal puts on objects.

Names are a pure function of (job, attempt, worker) so a repeat of a launch after a
crash finds the objects it made before (409 AlreadyExists) instead of making more.
Labels select; annotations carry the placement back when the scheduler restarts.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from scheduler.spec import JobSpec

Obj = dict[str, Any]
DOMAIN = "shoal.dev"
MANAGED_BY = "app.kubernetes.io/managed-by"
COMPONENT = "app.kubernetes.io/component"
INSTANCE = "app.kubernetes.io/instance"
NAME = "app.kubernetes.io/name"
JOB = f"{DOMAIN}/job"
QUEUE = f"{DOMAIN}/queue"
WORKER_INDEX = f"{DOMAIN}/worker-index"
ATTEMPT = f"{DOMAIN}/attempt"
RESERVATION = f"{DOMAIN}/reservation"  # label: the reservation pod a share runs on
NODE_LABEL = f"{DOMAIN}/node"
GPU_INDEX = f"{DOMAIN}/gpu-index"
# annotations
JOB_ID = f"{DOMAIN}/job-id"
NODE = f"{DOMAIN}/node"
GPUS = f"{DOMAIN}/gpus"
GPU_FRACTION = f"{DOMAIN}/gpu-fraction"
GPU_MEMORY = f"{DOMAIN}/gpu-memory"
GPU_UUID = f"{DOMAIN}/gpu-uuid"
# A fraction served as one MPS replica of the device plugin (no reservation, no UUID).
GPU_REPLICA = f"{DOMAIN}/gpu-replica"
# What a share's NVIDIA_VISIBLE_DEVICES says: its reservation's UUID, or the CDI name
# `<share_cdi_kind>=<uuid>` (a pod annotation never reaches the runtime: the variable does).
GPU_DEVICE = f"{DOMAIN}/gpu-device"
# How the device plugin handed the reservation its GPU (`reserve.delivery`): envvar,
# volume-mounts or cdi (a share then needs the NVIDIA runtime's RuntimeClass).
GPU_DELIVERY = f"{DOMAIN}/gpu-delivery"
ENFORCEMENT = f"{DOMAIN}/gpu-enforcement"
# A worker whose GPUs a DRA driver serves: the ResourceClaim Shoal made for it and
# allocates before the bind (no `nvidia.com/gpu`, no reservation).
DRA_CLAIM = f"{DOMAIN}/resource-claim"
PREEMPTED = f"{DOMAIN}/preempted"
STOP_REASON = f"{DOMAIN}/stop-reason"  # base.StopReason, a file in the pod
WORKERS = f"{DOMAIN}/workers"
FINISHED_AT = f"{DOMAIN}/finished-at"
# The init container of a reservation's share that checks it sees its GPU (`checkin`).
SHARE_CHECK = "share-check"

SHOAL = "shoal"
WORKER, RESERVATION_COMPONENT, RENDEZVOUS, HOSTFILE, NOMINEE_COMPONENT = (
    "worker",
    "gpu-reservation",
    "rendezvous",
    "hostfile",
    "nominee",  # holds a preemptor's room for kube-scheduler (nominees.py)
)

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _h(text: str, n: int = 6) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def _dns(text: str, limit: int) -> str:
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].rstrip("-")
    return s if s and s[0].isalpha() else f"x{s}"[:limit]


def job_base(job_id: str, job_name: str) -> str:
    """The stem of a job's object names: the id itself when it is a short DNS label
    starting with a letter (a Service name must), else the job name plus a hash."""
    if len(job_id) <= 40 and _DNS_LABEL.match(job_id):
        return job_id
    return f"{_dns(job_name, 33)}-{_h(job_id)}"


def pod_name(base: str, attempt: int, worker: int) -> str:
    return f"{base}-a{attempt}-w{worker}"


def hostfile_name(base: str, attempt: int) -> str:
    return f"{base}-a{attempt}-hostfile"


def claim_name(pod: str) -> str:
    """The ResourceClaim of a worker pod whose GPUs come from DRA (a pod name is at most
    63 characters here, so the suffix keeps it a DNS subdomain)."""
    return f"{pod}-gpu"


def group_name(base: str, attempt: int) -> str:
    """The Workload and PodGroup of one attempt of a gang (scheduling.k8s.io)."""
    return f"{base}-a{attempt}"


def reservation_name(node: str, gpu: int) -> str:
    """`shoal-gpu-{node}-g{index}`; long or dotted node names are shortened with a hash."""
    short = _dns(node, 36)
    if short != node:
        short = f"{_dns(node, 29)}-{_h(node)}"
    return f"shoal-gpu-{short}-g{gpu}"


def label_value(text: str) -> str:
    """`text` if it is a valid label value, else a stable hash of it."""
    return text if len(text) <= 63 and _LABEL_VALUE.match(text) else f"h-{_h(text, 20)}"


def labels_of(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def annotations_of(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def is_managed(obj: Obj) -> bool:
    return labels_of(obj).get(MANAGED_BY) == SHOAL


def node_pod_labels(component: str, node: str) -> dict[str, str]:
    """The labels of a pod Shoal keeps on one node for itself (a reservation, a nominee)."""
    return {
        NAME: "shoal",
        COMPONENT: component,
        MANAGED_BY: SHOAL,
        NODE_LABEL: label_value(node),
    }


def is_reservation(pod: Obj) -> bool:
    """A GPU reservation pod Shoal made (`reservations.reservationpod`)."""
    return is_managed(pod) and labels_of(pod).get(COMPONENT) == RESERVATION_COMPONENT


def is_shoal_placed(pod: Obj) -> bool:
    """Created by Shoal, or a foreign pod Shoal adopted and bound (it carries a job id)."""
    return is_managed(pod) or JOB_ID in annotations_of(pod)


def gpus_text(gpus: tuple[int, ...]) -> str:
    return ",".join(str(g) for g in gpus)


def parse_gpus(text: str) -> tuple[int, ...]:
    return tuple(int(g) for g in text.split(",") if g.strip().isdigit())


def namespace_refusals(
    spec: JobSpec, given: Sequence[str]
) -> list[tuple[tuple[str | int, ...], str]]:
    """A namespace Shoal is not `given`: it has no Role there to make the pods in."""
    if spec.namespace is None or spec.namespace in given:
        return []
    return [
        (
            ("namespace",),
            f"Shoal does not run jobs in namespace {spec.namespace!r} (it runs them in "
            f"{', '.join(given)}): an admin adds it to the chart's teamNamespaces, "
            "which grants Shoal's Role there",
        )
    ]
