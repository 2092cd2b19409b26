"""A foreign pod's volumes, claims and pod-level constraints as placement rules
(issue 24 item 1): table-driven over the pod spec shapes, with claims read from a
dict standing in for the API server's answers (the real one: tests/cluster/
test_node_rules.py)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.backends.kubernetes.view import podrules
from scheduler.model import NodeRules, Requirement

Obj = dict[str, Any]
HOST = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({}, ""),
        ({"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}, ""),  # allocated
        ({"affinity": {"podAffinity": {REQUIRED: [{}]}}}, "required podAffinity"),
        ({"affinity": {"podAntiAffinity": {REQUIRED: [{}]}}}, "required podAntiAffinity"),
        ({"affinity": {"podAntiAffinity": {PREFERRED: [{}]}}}, ""),
        ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": HOST}]}, "DoNotSchedule"),
        ({"topologySpreadConstraints": [{"whenUnsatisfiable": "ScheduleAnyway"}]}, ""),
    ],
)  # fmt: skip
def test_what_shoal_cannot_honour_is_said(spec: Obj, says: str) -> None:
    got = podrules.unsupported(spec)
    assert (says in got) if says else got == ""


def test_resource_claims_named_or_made_from_a_template() -> None:
    pod = {
        "spec": {
            "resourceClaims": [
                {"name": "own", "resourceClaimName": "mine"},
                {"name": "made", "resourceClaimTemplateName": "t"},
                {"name": "later", "resourceClaimTemplateName": "t"},
            ]
        },
        "status": {"resourceClaimStatuses": [{"name": "made", "resourceClaimName": "p-made-x1"}]},
    }
    assert podrules.resource_claims(pod) == ("mine", "p-made-x1", "")


def test_volume_claims_named_and_ephemeral() -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "volumes": [
                {"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}},
                {"name": "cfg", "configMap": {"name": "x"}},
            ]
        },
    }
    assert podrules.volume_claims(pod) == ("data", "p-scratch")


class Reads:
    """`get(resource, name, namespace)` over a dict, counting the reads."""

    def __init__(self, objects: dict[tuple[str, str], Obj]) -> None:
        self.objects = objects
        self.reads = 0

    def get(self, resource: str, name: str, namespace: str | None = None) -> Obj | None:
        self.reads += 1
        return self.objects.get((resource, name))


def pv_on(node: str) -> Obj:
    term = {"matchExpressions": [{"key": HOST, "operator": "In", "values": [node]}]}
    return {"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [term]}}}}


def test_a_bound_claim_brings_its_volumes_node_affinity_and_is_cached() -> None:
    kube = Reads({
        ("persistentvolumeclaims", "data"): {"spec": {"volumeName": "pv1"},
                                             "status": {"phase": "Bound"}},
        ("persistentvolumes", "pv1"): pv_on("n7"),
    })  # fmt: skip
    now = [0.0]
    rules = podrules.VolumeRules(kube, clock=lambda: now[0])
    want = NodeRules(required=(((Requirement(HOST, "In", ("n7",)),),),))
    assert rules.rules("default", ("data",)) == want
    reads = kube.reads
    now[0] = podrules.BOUND_TTL_S - 1
    assert rules.rules("default", ("data",)) == want and kube.reads == reads


@pytest.mark.parametrize(
    ("objects", "says"),
    [
        ({}, 'persistentvolumeclaim "data" not found'),
        ({("persistentvolumeclaims", "data"): {"spec": {"storageClassName": "fast"}}},
         'persistentvolumeclaim "data" is not bound yet'),
        ({("persistentvolumeclaims", "data"): {"spec": {"storageClassName": "wffc"}},
          ("storageclasses", "wffc"): {"volumeBindingMode": "WaitForFirstConsumer"}},
         "WaitForFirstConsumer): Shoal does not bind volumes"),
    ],
)  # fmt: skip
def test_a_claim_not_bound_keeps_the_pod_pending_with_the_reason(
    objects: dict[tuple[str, str], Obj], says: str
) -> None:
    got = podrules.VolumeRules(Reads(objects)).rules("default", ("data",))
    assert got is not None and says in got.blocked, got
