"""A multi-worker attempt as Kubernetes sees a gang (scheduling.k8s.io/v1beta1, 1.37):
a Workload with one PodGroup template, and the PodGroup its pods name in
`spec.schedulingGroup`. Shoal places the gang whole itself; these objects say so to
kube-scheduler, to `kubectl` and to tools that read gangs (queue dashboards, Kueue's
workload view), with the gang's size as `minCount`: all of a rigid job's workers, an
elastic job's `min` (it runs at any size from there up; the pods a grow adds join the
same PodGroup). Pure builders, plain JSON dicts.
"""

from __future__ import annotations

from typing import Any

from scheduler.backends import base
from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.pods.objectmeta import job_labels, object_meta

Obj = dict[str, Any]
GROUP = "scheduling.k8s.io/v1beta1"
TEMPLATE = "workers"
COMPONENT = "gang"


def is_gang(req: base.LaunchRequest) -> bool:
    """More than one worker, now or after a grow (an elastic job up to its `max`)."""
    return max(len(req.placements), req.spec.max_workers) > 1


def min_count(req: base.LaunchRequest) -> int:
    """The workers the gang needs: an elastic job's `min`, not its present size."""
    return req.spec.min_workers if req.spec.elastic else len(req.placements)


def _policy(req: base.LaunchRequest) -> Obj:
    return {"gang": {"minCount": min_count(req)}}


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
