"""The objects one launch creates, as plain JSON dicts (pure; validated by the tests
against the official schemas): a headless Service, an MPI hostfile ConfigMap, worker
pods, and the reservation pod that holds a shared GPU through the device plugin.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.backends import base, workerenv
from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.objectmeta import (
    is_fractional,
    job_labels,
    object_meta,
    owner_refs,
)
from scheduler.backends.kubernetes.reservationpod import DO_NOT_DISRUPT, RESERVER, reservation_pod
from scheduler.backends.kubernetes.workerpod import (
    GPU,
    PREEMPT_FILE,
    STOP_FILE,
    shm_mib,
    worker_pod,
)

# The worker and reservation pods have modules of their own; their names stay here.
__all__ = [
    "DO_NOT_DISRUPT",
    "GPU",
    "PREEMPT_FILE",
    "RESERVER",
    "STOP_FILE",
    "hostfile",
    "is_fractional",
    "job_labels",
    "owner_refs",
    "reservation_pod",
    "service",
    "shm_mib",
    "worker_pod",
]

Obj = dict[str, Any]


def service(req: base.LaunchRequest, base_name: str, ns: str) -> Obj:
    labels = job_labels(req, base_name, names.RENDEZVOUS)
    labels.pop(names.ATTEMPT)  # one Service serves every attempt
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(base_name, ns, labels, req),
        "spec": {
            "clusterIP": "None",
            "selector": {names.JOB: names.label_value(req.job_id), names.COMPONENT: names.WORKER},
            "publishNotReadyAddresses": True,  # rendezvous happens before readiness
            "ports": [{"name": "rendezvous", "port": workerenv.MASTER_PORT}],
        },
    }


def hostfile(req: base.LaunchRequest, base_name: str, ns: str, hosts: Sequence[str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(
            names.hostfile_name(base_name, req.attempt),
            ns,
            job_labels(req, base_name, names.HOSTFILE),
            req,
        ),
        "data": {
            "hostfile": workerenv.hostfile_text(
                hosts,
                [workerenv.mpi_slots(p) for p in sorted(req.placements, key=lambda p: p.worker)],
            )
        },
    }
