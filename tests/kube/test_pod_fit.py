"""Every resource a kubelet checks (issue 36 item 2): a foreign pod's requests as
kube-scheduler's NodeResourcesFit adds them up (containers, init containers and sidecars,
pod-level requests, overhead; extended resources, hugepages, MIG profiles, ephemeral
storage), its host ports as NodePorts sees them, and the nodes they do not fit. The
specs are those a user hands kube-scheduler; expectations follow
k8s.io/component-helpers/resource.PodRequests and the 1.37.2 Filter plugins."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.view import inventory, podfit
from scheduler.loop.service import Loop
from scheduler.model import WorkerPlacement

from .conftest import eventually, node
from .fakeapi import FakeKube

Obj = dict[str, Any]
GIB = 1024**3


def c(req: Obj | None = None, lim: Obj | None = None, **extra: Any) -> Obj:
    """A container with these requests and limits (and other fields)."""
    return {
        "name": "c",
        "image": "busybox",
        "resources": {"requests": req or {}, "limits": lim or {}},
        **extra,
    }


def pod_of(containers: list[Obj], name: str = "p", **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"shoal.dev/queue": "vision"}},
        "spec": {"schedulerName": "shoal", "containers": containers, **spec},
        "status": {"phase": "Pending"},
    }


SIDECAR = {"restartPolicy": "Always"}
CASES = [
    pytest.param(pod_of([c({"cpu": "1"}), c({"cpu": "500m", "memory": "1Gi"})]),
                 {"cpu": 1500, "memory": GIB}, id="containers-add-up"),
    pytest.param(pod_of([c(None, {"cpu": "2", "example.com/rdma": "1"})]),
                 {"cpu": 2000, "example.com/rdma": 1}, id="a-limit-is-the-request"),
    pytest.param(pod_of([c({"cpu": "1"})], initContainers=[c({"cpu": "3"}), c({"cpu": "2"})]),
                 {"cpu": 3000}, id="largest-init-container"),
    pytest.param(pod_of([c({"cpu": "1"})], initContainers=[c({"cpu": "500m"}, **SIDECAR)]),
                 {"cpu": 1500}, id="a-sidecar-runs-beside"),
    pytest.param(
        pod_of([c({"cpu": "1"})], initContainers=[
            c({"cpu": "1"}, **SIDECAR), c({"cpu": "2500m"}), c({"cpu": "1"}, **SIDECAR)]),
        {"cpu": 3500}, id="an-init-container-beside-the-sidecars-before-it"),
    pytest.param(pod_of([c({"memory": "1Gi"})], resources={"requests": {"cpu": "6"}}),
                 {"cpu": 6000, "memory": GIB}, id="pod-level-cpu"),
    pytest.param(pod_of([c({"cpu": "1", "memory": "1Gi"})],
                        resources={"requests": {"memory": "4Gi"}}),
                 {"cpu": 1000, "memory": 4 * GIB}, id="pod-level-replaces-the-sum"),
    pytest.param(pod_of([c()], resources={"limits": {"cpu": "4"}}),
                 {"cpu": 4000}, id="pod-level-limit-defaults-the-request"),
    pytest.param(pod_of([c({"cpu": "1"})], resources={"limits": {"cpu": "4"}}),
                 {"cpu": 1000}, id="pod-level-limit-over-container-requests"),
    pytest.param(pod_of([c({"cpu": "1", "example.com/rdma": "1"})],
                        resources={"requests": {"cpu": "2"}}),
                 {"cpu": 2000, "example.com/rdma": 1}, id="pod-level-leaves-extended-resources"),
    pytest.param(pod_of([c({"cpu": "1"})], overhead={"cpu": "250m", "memory": "120Mi"}),
                 {"cpu": 1250, "memory": 120 * 1024**2}, id="overhead"),
    pytest.param(
        pod_of([c({"memory": "1Gi", "hugepages-2Mi": "1Gi"},
                  {"memory": "1Gi", "hugepages-2Mi": "1Gi"})]),
        {"memory": GIB, "hugepages-2Mi": GIB}, id="hugepages"),
    pytest.param(pod_of([c({"nvidia.com/mig-1g.10gb": "1", "ephemeral-storage": "1.5"})]),
                 {"nvidia.com/mig-1g.10gb": 1, "ephemeral-storage": 2},
                 id="mig-and-storage-round-up"),
    pytest.param(pod_of([c({"cpu": "0.0001", "foo": "3", "requests.x/y": "1"})]),
                 {"cpu": 1}, id="millicores-round-up-unknown-names-ignored"),
]  # fmt: skip


@pytest.mark.parametrize(("pod", "expected"), CASES)
def test_a_pod_asks_what_kube_scheduler_counts(pod: Obj, expected: dict[str, int]) -> None:
    assert dict(podfit.ask(pod).resources) == expected
    # The core's three numbers come from the same sum.
    cpu, mem, _ = inventory.pod_requests(pod)
    assert (cpu, mem) == (expected.get("cpu", 0), expected.get("memory", 0) // 1024**2)


def port(p: int, host: int | None = None, **extra: Any) -> Obj:
    return {"containerPort": p, **({"hostPort": host} if host else {}), **extra}


@pytest.mark.parametrize(
    ("pod", "ports"),
    [
        pytest.param(pod_of([c(ports=[port(80), port(8080, 8080)])]),
                     (("0.0.0.0", "TCP", 8080),), id="only-host-ports"),
        pytest.param(pod_of([c(ports=[port(53, 53, protocol="UDP", hostIP="10.0.0.1")])]),
                     (("10.0.0.1", "UDP", 53),), id="ip-and-protocol"),
        pytest.param(pod_of([c(ports=[port(80)])], hostNetwork=True),
                     (("0.0.0.0", "TCP", 80),), id="host-network-takes-the-container-port"),
        pytest.param(
            pod_of([c()], initContainers=[c(ports=[port(9, 9)]), c(ports=[port(7, 7)], **SIDECAR)]),
            (("0.0.0.0", "TCP", 7),), id="sidecars-not-plain-init-containers"),
    ],
)  # fmt: skip
def test_host_ports_as_node_ports_reads_them(pod: Obj, ports: tuple[podfit.Port, ...]) -> None:
    assert podfit.host_ports(pod) == ports


EIGHT = {"cpu": "8", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8"}


def held(*pods: Obj) -> podfit.Held:
    h = podfit.Held()
    for p in pods:
        h.add(podfit.ask(p))
    return h


def on_node(alloc: Obj) -> Obj:
    return {"metadata": {"name": "n"}, "status": {"allocatable": alloc}}


HP = pod_of([c(ports=[port(8080, 8080)])])
FIT = [
    pytest.param(pod_of([c({"example.com/rdma": "1"})]), EIGHT, [],
                 "Insufficient example.com/rdma", id="extended-not-on-the-node"),
    pytest.param(pod_of([c({"nvidia.com/mig-1g.10gb": "1"})]), EIGHT, [],
                 "Insufficient nvidia.com/mig-1g.10gb", id="mig-profile"),
    pytest.param(pod_of([c({"hugepages-2Mi": "1Gi", "memory": "1Gi"})]), EIGHT, [],
                 "Insufficient hugepages-2Mi", id="hugepages"),
    pytest.param(pod_of([c({"hugepages-2Mi": "1Gi", "memory": "1Gi"})]),
                 {**EIGHT, "hugepages-2Mi": "2Gi"}, [pod_of([c({"hugepages-2Mi": "1Gi"})])],
                 None, id="hugepages-left"),
    pytest.param(pod_of([c({"example.com/rdma": "1"})]), {**EIGHT, "example.com/rdma": "1"},
                 [pod_of([c({"example.com/rdma": "1"})])], "Insufficient example.com/rdma",
                 id="extended-taken"),
    pytest.param(pod_of([c({"ephemeral-storage": "1Gi"})]), EIGHT, [],
                 "Insufficient ephemeral-storage", id="storage"),
    pytest.param(HP, EIGHT, [HP], podfit.PORTS_REASON, id="same-host-port"),
    pytest.param(HP, EIGHT, [pod_of([c(ports=[port(8080, 8080, protocol="UDP")])])], None,
                 id="other-protocol"),
    pytest.param(pod_of([c(ports=[port(8080, 8080, hostIP="10.0.0.1")])]), EIGHT,
                 [pod_of([c(ports=[port(8080, 8080, hostIP="10.0.0.2")])])], None, id="other-ip"),
    pytest.param(pod_of([c(ports=[port(8080, 8080, hostIP="10.0.0.1")])]), EIGHT, [HP],
                 podfit.PORTS_REASON, id="all-ips-taken"),
    pytest.param(HP, EIGHT, [pod_of([c(ports=[port(8080, 8080, hostIP="10.0.0.2")])])],
                 podfit.PORTS_REASON, id="all-ips-wanted"),
    pytest.param(pod_of([c({"cpu": "100"})]), {**EIGHT, "pods": "1"}, [pod_of([c()])],
                 "Too many pods", id="pod-count-cpu-left-to-the-core"),
    pytest.param(pod_of([c({"cpu": "1"})]), EIGHT, [pod_of([c({"cpu": "8"})])], None,
                 id="cpu-is-the-cores"),
]  # fmt: skip


@pytest.mark.parametrize(("pod", "alloc", "there", "why"), FIT)
def test_a_node_refuses_what_kube_scheduler_refuses(
    pod: Obj, alloc: Obj, there: list[Obj], why: str | None
) -> None:
    assert podfit.refusal(podfit.ask(pod), podfit.allocatable(on_node(alloc)), held(*there)) == why


def test_cpu_and_memory_refused_when_asked() -> None:
    """The same check counts cpu and memory when the caller does not leave them out."""
    a = podfit.ask(pod_of([c({"cpu": "6", "memory": "1Gi"})]))
    there = held(pod_of([c({"cpu": "6"})]))
    alloc = podfit.allocatable(on_node(EIGHT))
    assert podfit.refusal(a, alloc, there, skip=()) == "Insufficient cpu"


QTY = st.sampled_from(["0", "100m", "1", "2", "1500m", "3"])
RES = st.dictionaries(
    st.sampled_from(["cpu", "example.com/rdma", "hugepages-2Mi"]), QTY, max_size=3
)
CONTAINER = st.builds(lambda r, side: c(r, **(SIDECAR if side else {})), RES, st.booleans())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.builds(c, RES), min_size=1, max_size=3), st.lists(CONTAINER, max_size=4))
def test_the_sum_covers_every_moment_of_the_pods_life(
    containers: list[Obj], init: list[Obj]
) -> None:
    """PodRequests is the peak of what runs at once: the containers with every sidecar,
    and each plain init container with the sidecars started before it."""
    got = podfit.requests(pod_of(containers, initContainers=init))

    def total(cs: list[Obj]) -> dict[str, Fraction]:
        out: dict[str, Fraction] = {}
        for x in cs:
            for k, v in x["resources"]["requests"].items():
                out[k] = out.get(k, Fraction(0)) + podfit.quantity(v)
        return out

    moments = [containers + [x for x in init if x.get("restartPolicy") == "Always"]]
    for i, x in enumerate(init):
        if x.get("restartPolicy") != "Always":
            moments.append([y for y in init[:i] if y.get("restartPolicy") == "Always"] + [x])
    peak: dict[str, Fraction] = {}
    for m in moments:
        for k, v in total(m).items():
            peak[k] = max(peak.get(k, Fraction(0)), v)
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in peak.items() if v}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(RES, st.sampled_from([0, 80, 8080]), st.booleans()), max_size=6))
def test_held_is_the_pods_on_the_node_in_any_order(specs: list[tuple[Obj, int, bool]]) -> None:
    pods = [
        pod_of([c(r, ports=[port(p, p, protocol="UDP" if udp else "TCP")] if p else [])])
        for r, p, udp in specs
    ]
    h = held(*pods)
    again = held(*reversed(pods))
    assert (h.pods, +h.resources, h.ports) == (again.pods, +again.resources, again.ports)
    for p in pods:
        h.add(podfit.ask(p), -1)
    assert h.empty()


# ---- the seven pods of issue 36, through the real loop over the fake API server ----

Make = Callable[..., KubernetesBackend]


def seven() -> list[Obj]:
    small = {"cpu": "100m"}
    hp = [port(8080, 8080)]
    return [
        pod_of([c({**small, "example.com/rdma": "1"}, {"example.com/rdma": "1"})], "rdma"),
        pod_of([c({**small, "nvidia.com/mig-1g.10gb": "1"})], "mig"),
        pod_of([c({**small, "memory": "1Gi", "hugepages-2Mi": "1Gi"},
                  {"memory": "1Gi", "hugepages-2Mi": "1Gi"})], "hugepages"),
        pod_of([c(small, ports=hp)], "port-a"),
        pod_of([c(small, ports=hp)], "port-b"),
        pod_of([c()], "cpu-a", resources={"requests": {"cpu": "6"}}),
        pod_of([c()], "cpu-b", resources={"requests": {"cpu": "6"}}),
    ]  # fmt: skip


def scheduled(kube: FakeKube, name: str) -> Obj | None:
    conds = kube.obj("pods", name, "default")["status"].get("conditions") or []
    return next((x for x in conds if x["type"] == "PodScheduled"), None)


def test_the_seven_pods_are_placed_or_refused_as_kube_scheduler_would(
    kube: FakeKube, loop: Loop
) -> None:
    kube.put("nodes", node("n1", gpus=8, cpu="8"))
    for p in seven():
        kube.put("pods", p)
    backend = loop.backend
    assert isinstance(backend, KubernetesBackend)
    eventually(lambda: len(backend.foreign_pods()) == 7, 20)
    bound: dict[str, str] = {}

    def settled() -> bool:
        loop.run_once()
        for p in kube.objects("pods", "default"):
            if p["spec"].get("nodeName"):
                bound[p["metadata"]["name"]] = p["spec"]["nodeName"]
        waiting = [n for n in ("rdma", "mig", "hugepages") if scheduled(kube, n)]
        return len(bound) == 2 and len(waiting) == 3 and backend.foreign_pods() != []

    eventually(settled, 30)
    for _ in range(3):  # more cycles bind nothing more
        loop.run_once()
    named = {p["metadata"]["name"]: p for p in kube.objects("pods", "default")}
    placed = {n for n, p in named.items() if p["spec"].get("nodeName")}
    assert len(placed) == 2 and placed & {"port-a", "port-b"} and placed & {"cpu-a", "cpu-b"}
    why = {n: (scheduled(kube, n) or {}).get("message", "") for n in named}
    assert "Insufficient example.com/rdma" in why["rdma"]
    assert "Insufficient nvidia.com/mig-1g.10gb" in why["mig"]
    assert "Insufficient hugepages-2Mi" in why["hugepages"]
    other_port = "port-b" if named["port-a"]["spec"].get("nodeName") else "port-a"
    assert podfit.PORTS_REASON in eventually(lambda: why_now(kube, other_port, "free ports"), 20)
    other_cpu = "cpu-b" if named["cpu-a"]["spec"].get("nodeName") else "cpu-a"
    assert "cpu" in why[other_cpu].lower(), why[other_cpu]


def why_now(kube: FakeKube, name: str, part: str) -> str | None:
    message = str((scheduled(kube, name) or {}).get("message", ""))
    return message if part in message else None


def test_a_bind_rechecks_the_node_against_the_binds_before_it(
    kube: FakeKube, make_backend: Make
) -> None:
    """Placed in one cycle, two pods asking one host port: the first is bound, the second
    waits with NodePorts' reason; its next listing keeps it off the node."""
    kube.put("nodes", node("n1", gpus=8, cpu="8"))
    for name in ("port-a", "port-b"):
        kube.put("pods", pod_of([c({"cpu": "100m"}, ports=[port(8080, 8080)])], name))
    b = make_backend()
    eventually(lambda: len(b.foreign_pods()) == 2, 20)
    at = WorkerPlacement(0, "n1", (), 1.0)
    b.bind_foreign("pod:default/port-a", at)
    b.bind_foreign("pod:default/port-b", at)
    eventually(lambda: kube.obj("pods", "port-a", "default")["spec"].get("nodeName"), 20)
    assert not kube.obj("pods", "port-b", "default")["spec"].get("nodeName")
    message = (scheduled(kube, "port-b") or {}).get("message", "")
    assert message == f"node n1: {podfit.PORTS_REASON} (since this cycle began)"
    (waiting,) = eventually(lambda: b.foreign_pods(), 20)
    assert waiting.rules is not None
    assert waiting.rules.excluded == ((podfit.PORTS_REASON, frozenset({"n1"})),)


def test_every_pod_on_the_node_counts_whoever_placed_it(kube: FakeKube, make_backend: Make) -> None:
    """kube-scheduler's pods, Shoal's own workers: each takes one of the node's pods and
    its requests; a pod that does not fit beside them is kept off the node."""
    full = node("n1", gpus=8, cpu="8")
    full["status"]["allocatable"].update({"pods": "3", "example.com/rdma": "2"})
    kube.put("nodes", node("n2", gpus=8, cpu="8"))
    kube.put("nodes", full)
    other = pod_of([c({"example.com/rdma": "1"})], "other", schedulerName="default-scheduler")
    other["spec"]["nodeName"], other["status"]["phase"] = "n1", "Running"
    worker = pod_of([c({"cpu": "1"})], "worker")
    worker["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "shoal"
    worker["metadata"]["annotations"] = {"shoal.dev/job-id": "j", "shoal.dev/node": "n1"}
    kube.put("pods", other)
    kube.put("pods", worker)  # created by Shoal, not bound yet: its node is in its annotation
    kube.put("pods", pod_of([c({"example.com/rdma": "1"})], "one-more"))
    kube.put("pods", pod_of([c({"example.com/rdma": "2"})], "two-more"))
    b = make_backend()
    got = eventually(
        lambda: {f.name: f for f in b.foreign_pods()} if len(b.foreign_pods()) == 2 else None, 20
    )
    n2 = ("Insufficient example.com/rdma", frozenset({"n2"}))  # it has none
    one = got["one-more"].rules  # n1: 2 of 3 pods, 1 of 2 rdma taken
    assert one is not None and one.excluded == (n2,)
    two = got["two-more"].rules
    assert two is not None and two.excluded == (
        ("Insufficient example.com/rdma", frozenset({"n1", "n2"})),
    )
    kube.put(
        "pods", {**pod_of([c()], "third"), "spec": {**pod_of([c()])["spec"], "nodeName": "n1"}}
    )
    too_many = eventually(
        lambda: next(
            (f.rules for f in b.foreign_pods() if f.name == "one-more" and f.rules != one), None
        ),
        20,
    )
    assert too_many.excluded == (n2, ("Too many pods", frozenset({"n1"})))


def test_a_gang_is_bound_whole_only_if_its_members_fit_beside_each_other(
    kube: FakeKube, make_backend: Make
) -> None:
    """Two members of one PodGroup placed on one node asking one host port: neither is
    bound (no half gang), each says why; placed on two nodes, both are bound."""
    for n in ("n1", "n2"):
        kube.put("nodes", node(n, gpus=8, cpu="8"))
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    kube.put("podgroups", group)
    for name in ("m-0", "m-1"):
        member = pod_of([c({"cpu": "100m"}, ports=[port(8080, 8080)])], name)
        member["spec"]["schedulingGroup"] = {"podGroupName": "g"}
        kube.put("pods", member)
    b = make_backend()
    (gang,) = eventually(lambda: b.foreign_requests(), 20)
    assert gang.id == "podgroup:default/g" and gang.workers == 2
    for w in range(2):
        b.bind_foreign(gang.id, WorkerPlacement(w, "n1", (), 1.0))
    for name in ("m-0", "m-1"):
        message = eventually(lambda n=name: why_now(kube, n, "free ports"), 20)
        assert message.startswith("node n1: didn't have free ports"), message
    assert not any(p["spec"].get("nodeName") for p in kube.objects("pods", "default"))
    b.foreign_requests()
    for w, n in enumerate(("n1", "n2")):
        b.bind_foreign(gang.id, WorkerPlacement(w, n, (), 1.0))

    def bound() -> dict[str, str]:
        pods = kube.objects("pods", "default")
        return {
            p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")
        }

    assert eventually(lambda: len(bound()) == 2 and bound(), 20) == {"m-0": "n1", "m-1": "n2"}
