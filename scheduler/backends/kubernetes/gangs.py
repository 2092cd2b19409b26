"""A multi-worker attempt as Kubernetes sees a gang (scheduling.k8s.io/v1beta1, 1.37):
a Workload with one PodGroup template, and the PodGroup its pods name in
`spec.schedulingGroup`. Shoal places the gang whole itself; these objects say so to
kube-scheduler, to `kubectl` and to tools that read gangs (queue dashboards, Kueue's
workload view), with the gang's size as `minCount`. Pure builders, plain JSON dicts.
"""

from __future__ import annotations

from typing import Any

from scheduler.backends import base
from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.objectmeta import job_labels, object_meta

Obj = dict[str, Any]
GROUP = "scheduling.k8s.io/v1beta1"
TEMPLATE = "workers"
COMPONENT = "gang"


def is_gang(req: base.LaunchRequest) -> bool:
    return len(req.placements) > 1


def _policy(req: base.LaunchRequest) -> Obj:
    return {"gang": {"minCount": len(req.placements)}}


def workload(req: base.LaunchRequest, stem: str, ns: str) -> Obj:
    name = names.group_name(stem, req.attempt)
    return {
        "apiVersion": GROUP,
        "kind": "Workload",
        "metadata": object_meta(name, ns, job_labels(req, stem, COMPONENT), req),
        "spec": {"podGroupTemplates": [{"name": TEMPLATE, "schedulingPolicy": _policy(req)}]},
    }


def pod_group(req: base.LaunchRequest, stem: str, ns: str) -> Obj:
    name = names.group_name(stem, req.attempt)
    return {
        "apiVersion": GROUP,
        "kind": "PodGroup",
        "metadata": object_meta(name, ns, job_labels(req, stem, COMPONENT), req),
        "spec": {
            "workloadRef": {"workloadName": name, "templateName": TEMPLATE},
            "schedulingPolicy": _policy(req),
        },
    }


def join(pod: Obj, group: str) -> Obj:
    """`pod`, naming the PodGroup it belongs to."""
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod
