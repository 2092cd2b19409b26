"""The objects one launch creates beside its pods, as plain JSON dicts (pure; validated
by the tests against the official schemas): a headless Service and an MPI hostfile
ConfigMap. The pods are `workerpod`'s and `reservationpod`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.backends import base, workerenv
from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.pods.objectmeta import job_labels, object_meta

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
