"""Gangs that heal (issue 36 item 3): a PodGroup's members placed already count toward its
minCount, as kube-scheduler 1.37 counts assigned and assumed pods. A third pod of a group
of minCount 2 is placed on its own once the first two are; a member recreated beside a
running one is placed alone; a member joining placed ones goes to their topology domain.
Driven through the backend over the fake API server (the loop's calls, in its order)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.foreignpods import foreigngangs
from scheduler.model import JobRequest, Requirement, WorkerPlacement

from .conftest import eventually, node
from .fakeapi import FakeKube

Obj = dict[str, Any]
Make = Callable[..., KubernetesBackend]


def group(name: str, min_count: int, topology: str = "") -> Obj:
    spec: Obj = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def member(name: str, grp: str, on: str = "") -> Obj:
    spec: Obj = {
        "schedulerName": "shoal",
        "schedulingGroup": {"podGroupName": grp},
        "containers": [{"name": "c", "image": "busybox", "resources": {
            "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}],
    }  # fmt: skip
    if on:
        spec["nodeName"] = on
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"shoal.dev/queue": "q"}},
        "spec": spec,
        "status": {"phase": "Running" if on else "Pending"},
    }


def offered(b: KubernetesBackend, count: int) -> dict[str, JobRequest]:
    """The foreign jobs the loop is offered, once there are `count` of them."""
    got = {r.id: r for r in b.foreign_requests()}
    return got if len(got) == count else {}


def blocked(r: JobRequest) -> str:
    return r.nodes.blocked if r.nodes is not None else ""


def test_a_third_member_is_placed_alone_once_the_first_two_are(
    kube: FakeKube, make_backend: Make
) -> None:
    """minCount 2, three pods: a gang of two, and the third waits for it (saying so);
    once the two are bound (in flight, then in the cache), the third is a job of its own."""
    kube.put("nodes", node("n1", gpus=8))
    kube.put("podgroups", group("trio", 2))
    for i in range(3):
        kube.put("pods", member(f"m-{i}", "trio"))
    b = make_backend()
    jobs = eventually(lambda: offered(b, 2), 20)
    gang, third = jobs["podgroup:default/trio"], jobs["pod:default/m-2"]
    assert gang.workers == 2 and not blocked(gang)
    assert "waits for its first 2 pods to be placed" in blocked(third)
    for w in range(2):
        b.bind_foreign(gang.id, WorkerPlacement(w, "n1", (w,), 1.0))
    # In flight or bound already: either way the two count toward minCount at once.
    (alone,) = b.foreign_requests()
    assert alone.id == "pod:default/m-2" and alone.workers == 1 and not blocked(alone)
    eventually(lambda: all(p["spec"].get("nodeName") for p in pods(kube, "m-0", "m-1")), 20)
    b.foreign_running()  # the cache shows them: the binds settle
    (alone,) = eventually(lambda: list(offered(b, 1).values()), 20)
    assert alone.id == "pod:default/m-2" and not blocked(alone)
    b.bind_foreign(alone.id, WorkerPlacement(0, "n1", (2,), 1.0))
    eventually(lambda: pods(kube, "m-2")[0]["spec"].get("nodeName") == "n1", 20)


def pods(kube: FakeKube, *names: str) -> list[Obj]:
    by = {p["metadata"]["name"]: p for p in kube.objects("pods", "default")}
    return [by[n] for n in names]


@pytest.mark.parametrize(
    ("placed", "finished", "expect"),
    [
        # One of two placed: the new pod is the gang's missing member, a gang of one.
        pytest.param(1, False, "podgroup:default/pair", id="one-running-one-new"),
        pytest.param(2, False, "pod:default/m-new", id="quorum-met-already"),
        # A finished member is no member (counted, the new pod would go alone).
        pytest.param(1, True, "podgroup:default/pair", id="finished-does-not-count"),
    ],
)
def test_a_recreated_member_joins_its_running_gang(
    kube: FakeKube, make_backend: Make, placed: int, finished: bool, expect: str
) -> None:
    """A Job controller replaces a failed member: the new pod joins the placed ones."""
    kube.put("nodes", node("n1", gpus=8))
    kube.put("podgroups", group("pair", 2))
    for i in range(placed):
        kube.put("pods", member(f"m-{i}", "pair", on="n1"))
    if finished:
        done = member("m-done", "pair", on="n1")
        done["status"]["phase"] = "Failed"
        kube.put("pods", done)
    kube.put("pods", member("m-new", "pair"))
    b = make_backend()
    (job,) = eventually(lambda: list(offered(b, 1).values()), 20)
    assert job.id == expect and job.workers == 1 and not blocked(job)


def test_a_member_joins_the_topology_domain_of_those_placed(
    kube: FakeKube, make_backend: Make
) -> None:
    """With `schedulingConstraints.topology`, a member joining a placed one may use only
    the nodes of that member's domain; a new gang asking one domain waits, saying why."""
    for n, rack in (("n1", "a"), ("n2", "b")):
        obj = node(n, gpus=8)
        obj["metadata"]["labels"]["example.com/rack"] = rack
        kube.put("nodes", obj)
    kube.put("podgroups", group("racked", 2, topology="example.com/rack"))
    kube.put("podgroups", group("fresh", 2, topology="example.com/rack"))
    kube.put("pods", member("r-0", "racked", on="n1"))
    kube.put("pods", member("r-1", "racked"))
    kube.put("pods", member("f-0", "fresh"))
    kube.put("pods", member("f-1", "fresh"))
    b = make_backend()
    jobs = eventually(lambda: offered(b, 2), 20)
    joining, fresh = jobs["podgroup:default/racked"], jobs["podgroup:default/fresh"]
    assert joining.workers == 1 and not blocked(joining)
    assert joining.nodes is not None
    assert ((Requirement("example.com/rack", "In", ("a",)),),) in joining.nodes.required
    assert fresh.workers == 2
    assert "share one example.com/rack domain" in blocked(fresh)


def test_a_changed_min_count_is_read_again(
    kube: FakeKube, make_backend: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """minCount is mutable (a workload scaled): lowered to the pods there, they go."""
    monkeypatch.setattr(foreigngangs, "POLICY_TTL_S", 0.0)
    kube.put("nodes", node("n1", gpus=8))
    kube.put("podgroups", group("scaled", 3))
    for i in range(2):
        kube.put("pods", member(f"s-{i}", "scaled"))
    b = make_backend()
    (gang,) = eventually(lambda: list(offered(b, 1).values()), 20)
    assert "2 of 3 pods" in blocked(gang)
    kube.put("podgroups", group("scaled", 2))
    (gang,) = b.foreign_requests()
    assert gang.workers == 2 and not blocked(gang)
