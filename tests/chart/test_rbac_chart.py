"""The chart's RBAC, verb by verb (docs/install.md, "RBAC"): least privilege, the
cluster-wide/jobs-namespace split that `rbac.foreignPods` moves, and the DRA
(resource.k8s.io) and Workload/PodGroup (scheduling.k8s.io) grants Kubernetes 1.37 needs."""

from __future__ import annotations

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
