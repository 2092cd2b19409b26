"""The chart's RBAC, verb by verb (docs/install.md, "RBAC"): least privilege, the
cluster-wide/jobs-namespace split that `rbac.foreignPods` moves, and the DRA
(resource.k8s.io) and Workload/PodGroup (scheduling.k8s.io) grants Kubernetes 1.37 needs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .conftest import Render, by_kind, role_rules

READ = {"get", "list", "watch"}
WRITE = {"create", "update", "patch", "delete"}
STATUS = {"get", "update", "patch"}
DRA, SCHED = "resource.k8s.io", "scheduling.k8s.io"


def test_rbac_is_least_privilege(render: Render) -> None:
    docs = render()
    cluster = role_rules(docs, "ClusterRole", "shoal")
    assert cluster[("", "nodes")] == READ
    assert cluster[("", "pods")] == {"get", "list", "watch", "patch", "delete"}
    assert cluster[("", "pods/binding")] == {"create"}
    assert cluster[("", "events")] == {"create", "patch"}
    assert cluster[("shoal.dev", "trainingjobs/status")] == {"get", "patch", "update"}
    # Only PodScheduled=False on foreign pods that wait (the kubelet writes the rest).
    assert cluster[("", "pods/status")] == {"patch"}
    # Stops Shoal decides evict (adopted foreign pods anywhere), so PDBs are honoured;
    # a preemption reads PDBs to prefer victims whose budget allows the eviction.
    assert cluster[("", "pods/eviction")] == {"create"}
    assert cluster[("policy", "poddisruptionbudgets")] == READ
    assert ("", "secrets") not in cluster
    for verbs in cluster.values():
        assert "*" not in verbs and "escalate" not in verbs and "bind" not in verbs
    jobs = role_rules(docs, "Role", "shoal-jobs")
    assert jobs[("", "pods")] == {"create"}
    assert jobs[("", "services")] == {"get", "list", "create", "delete"}
    assert by_kind(docs, "Role", "shoal-jobs")["metadata"]["namespace"] == "shoal-jobs"
    lease = role_rules(docs, "Role", "shoal-leader-election")
    assert lease == {("coordination.k8s.io", "leases"): {"get", "create", "update"}}
    named = [
        r for r in by_kind(docs, "Role", "shoal-leader-election")["rules"] if "get" in r["verbs"]
    ]
    assert [r.get("resourceNames") for r in named] == [["shoal-scheduler"]]
    assert role_rules(docs, "Role", "shoal-reserve") == {("", "pods"): {"get", "patch"}}


def test_foreign_pods_off_narrows_pod_writes_to_the_jobs_namespace(render: Render) -> None:
    docs = render("rbac.foreignPods=false")
    assert role_rules(docs, "ClusterRole", "shoal")[("", "pods")] == READ
    assert role_rules(docs, "Role", "shoal-jobs")[("", "pods")] == {"create", "patch", "delete"}
    assert ("", "pods/status") not in role_rules(docs, "ClusterRole", "shoal")
    assert role_rules(docs, "Role", "shoal-jobs")[("", "pods/status")] == {"patch"}
    assert ("", "pods/eviction") not in role_rules(docs, "ClusterRole", "shoal")
    assert role_rules(docs, "Role", "shoal-jobs")[("", "pods/eviction")] == {"create"}


def test_dra_and_workloads_with_foreign_pods(render: Render) -> None:
    """Default: read everywhere, write claims/Workloads/PodGroups and their status in any
    namespace (foreign pods' too); only create stays in the jobs namespace, as for pods."""
    docs = render()
    cluster = role_rules(docs, "ClusterRole", "shoal")
    for res in ("resourceslices", "deviceclasses", "resourceclaimtemplates"):
        assert cluster[(DRA, res)] == READ
    for key in ((DRA, "resourceclaims"), (SCHED, "workloads"), (SCHED, "podgroups")):
        assert cluster[key] == READ | WRITE - {"create"}
    assert cluster[(DRA, "resourceclaims/status")] == STATUS
    assert cluster[(SCHED, "podgroups/status")] == STATUS
    jobs = role_rules(docs, "Role", "shoal-jobs")
    for key in ((DRA, "resourceclaims"), (SCHED, "workloads"), (SCHED, "podgroups")):
        assert jobs[key] == {"create"}
        assert cluster[key] | jobs[key] == READ | WRITE
    assert (DRA, "resourceclaims/status") not in jobs


def test_dra_and_workloads_without_foreign_pods(render: Render) -> None:
    docs = render("rbac.foreignPods=false")
    cluster = role_rules(docs, "ClusterRole", "shoal")
    jobs = role_rules(docs, "Role", "shoal-jobs")
    for res in ("resourceslices", "deviceclasses", "resourceclaimtemplates"):
        assert cluster[(DRA, res)] == READ
    for key in ((DRA, "resourceclaims"), (SCHED, "workloads"), (SCHED, "podgroups")):
        assert cluster[key] == READ
        assert jobs[key] == WRITE
    for key in ((DRA, "resourceclaims/status"), (SCHED, "podgroups/status")):
        assert key not in cluster
        assert jobs[key] == STATUS


def _in(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, dict[str, Any]]:
    """Each namespace's (Cluster)Role or binding of that name."""
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    by_ns = {d["metadata"]["namespace"]: d for d in found}
    assert len(by_ns) == len(found), f"two {kind} {name} in one namespace"
    return by_ns


def _rules(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    return role_rules([role], role["kind"], role["metadata"]["name"])


def _options(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return json.loads(by_kind(docs, "ConfigMap", "shoal-policy")["data"]["kube-options.json"])


@pytest.mark.parametrize("foreign", ["true", "false"])
def test_team_namespaces_get_the_jobs_role(render: Render, foreign: str) -> None:
    """Issue 37 item 1: a team namespace gets the jobs namespace's Role, rule for rule,
    bound to Shoal's ServiceAccount; the chart does not create the namespace."""
    docs = render("teamNamespaces={vision,nlp}", f"rbac.foreignPods={foreign}")
    roles = _in(docs, "Role", "shoal-jobs")
    bindings = _in(docs, "RoleBinding", "shoal-jobs")
    assert set(roles) == set(bindings) == {"shoal-jobs", "vision", "nlp"}
    jobs = _rules(roles["shoal-jobs"])
    for ns in ("vision", "nlp"):
        assert _rules(roles[ns]) == jobs
        assert roles[ns]["rules"] == roles["shoal-jobs"]["rules"]
        assert bindings[ns]["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "shoal-jobs",
        }
        assert bindings[ns]["subjects"] == [
            {"kind": "ServiceAccount", "name": "shoal", "namespace": "shoal-system"}
        ]
    assert jobs[("", "pods")] >= {"create"} and jobs[("", "services")] >= {"create", "delete"}
    # Evictions there: the ClusterRole's with foreign pods, else each namespace's Role.
    cluster = role_rules(docs, "ClusterRole", "shoal")
    evict = cluster if foreign == "true" else jobs
    assert evict[("", "pods/eviction")] == {"create"}
    namespaces = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
    assert not namespaces & {"vision", "nlp"}
    opts = _options(docs)
    assert opts["teamNamespaces"] == ["vision", "nlp"]
    if foreign == "false":  # pod writes are granted there only
        assert opts["foreignNamespaces"] == ["shoal-jobs", "vision", "nlp"]
    else:
        assert "foreignNamespaces" not in opts


def test_team_namespaces_default_and_the_jobs_namespace_listed(render: Render) -> None:
    docs = render()
    assert _options(docs)["teamNamespaces"] == []
    assert set(_in(docs, "Role", "shoal-jobs")) == {"shoal-jobs"}
    assert set(_in(docs, "RoleBinding", "shoal-jobs")) == {"shoal-jobs"}
    assert _options(render("rbac.foreignPods=false"))["foreignNamespaces"] == ["shoal-jobs"]
    # The jobs namespace named again: one Role there, not a duplicate.
    docs = render("teamNamespaces={shoal-jobs,vision}", "rbac.foreignPods=false")
    assert set(_in(docs, "Role", "shoal-jobs")) == {"shoal-jobs", "vision"}
    assert _options(docs)["teamNamespaces"] == ["vision"]
    assert _options(docs)["foreignNamespaces"] == ["shoal-jobs", "vision"]


def test_nodes_status_patch_advertises_the_gpu_fraction_resource(render: Render) -> None:
    """Issue 37 item 5: Shoal patches node status with shoal.dev/gpu-milli, so that a
    team namespace's ResourceQuota counts fractional workers; nothing else on nodes."""
    for foreign in ("true", "false"):
        cluster = role_rules(render(f"rbac.foreignPods={foreign}"), "ClusterRole", "shoal")
        assert cluster[("", "nodes/status")] == {"patch"}
        assert cluster[("", "nodes")] == READ
