"""One allocator per DRA device beside kube-scheduler (issue 36 item 1), probed on a
control plane of its own with kube-scheduler running (default profile, DynamicResources
on) and the chart installed with its defaults; kwok plays the kubelet, the test the DRA
driver.

The workload of the issue: one node with 8 GPUs in a ResourceSlice; 8 one-GPU
TrainingJobs, then 0.5-1 s later 8 default-scheduler pods with a ResourceClaimTemplate
for one `gpu.nvidia.com` device. Every allocated claim is sampled while the run settles
and no device may ever be in two. Two configurations, one Shoal each, reused run after
run (objects deleted between runs):

- Shoal's own pool: the node is labelled and tainted `shoal.dev/pool=shoal`. Shoal's
  jobs take the 8 GPUs; kube-scheduler's pods, which do not tolerate the taint, wait.
- Shared node: no pool label. kube-scheduler's pods take the 8 GPUs; Shoal allocates
  nothing there and its jobs wait, their reason naming the node and why.
- Misconfigured: the pool's node, but kube-scheduler's pods tolerate every taint. Both
  allocate there; only Shoal's check after allocation stands between them. A known
  gap, measured (xfail): see docs/kubernetes.md.

Runs per configuration: SHOAL_PROBE_RUNS (default 20). The figures go to the log and
to docs/kubernetes.md, "Beside kube-scheduler, Kueue and KAI".
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import kubernetes
import pytest
from support.draslices import gpu_class, gpu_slice

from .conftest import JOBS_NS, ControlPlane, eventually
from .localshoal import Shoal
from .test_jobs import queue, trainingjob

pytestmark = pytest.mark.cluster
log = logging.getLogger(__name__)
Obj = dict[str, Any]
NODE, GPUS, DRIVER = "kw-r1", 8, "gpu.nvidia.com"
TEMPLATE = "one-gpu"
RUNS = int(os.environ.get("SHOAL_PROBE_RUNS", "20"))


@dataclass
class Figures:
    """What the runs of one configuration measured."""

    runs: int = 0
    samples: int = 0
    doubles: list[str] = field(default_factory=list)  # each sample's "run i: device in ..."
    seconds: list[float] = field(default_factory=list)  # each run, start to settled

    def __str__(self) -> str:
        mean = sum(self.seconds) / len(self.seconds) if self.seconds else 0.0
        return (
            f"{self.runs} runs, {self.samples} samples of every claim, "
            f"{len(self.doubles)} sighting(s) of a device in two claims, "
            f"{mean:.1f} s a run to settle (max {max(self.seconds, default=0.0):.1f} s)"
        )


def the_node(cp: ControlPlane, *, pool: bool) -> None:
    """NODE with 8 GPUs published by the DRA driver (and none by the device plugin), the
    classes, and the claim template kube-scheduler's pods use."""
    cp.add_node(NODE, gpus=0, pool=pool)
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": TEMPLATE, "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}
            }
        },
    }
    objs = (gpu_class(), gpu_class("mig.nvidia.com", type="mig"), *gpu_slice(NODE, gpus=GPUS))
    for obj in (*objs, template):
        cp.kubectl("apply", "-f", "-", input=json.dumps(obj))
    queue(cp)


def theirs(i: int, run: int, *, tolerate: bool = False) -> Obj:
    """A pod kube-scheduler places (no schedulerName), with a claim from the template;
    with `tolerate`, one that tolerates every taint (as DaemonSets do), Shoal's pool's
    too: a misconfiguration."""
    tolerations = [{"operator": "Exists"}] if tolerate else []
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"ks-{run}-{i}"},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "tolerations": tolerations,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]},
                }
            ],
        },
    }


def allocations(cp: ControlPlane) -> dict[str, list[str]]:
    """Every claim's devices, fresh from the API server: claim -> driver/pool/device."""
    got = kubernetes.client.ResourceV1Api(cp.api).list_resource_claim_for_all_namespaces(
        _preload_content=False
    )
    out = {}
    for c in json.loads(got.data)["items"]:
        alloc = (c.get("status") or {}).get("allocation") or {}
        results = (alloc.get("devices") or {}).get("results") or []
        key = f"{c['metadata']['namespace']}/{c['metadata']['name']}"
        out[key] = [f"{r['driver']}/{r['pool']}/{r['device']}" for r in results]
    return out


def doubles(claims: dict[str, list[str]]) -> list[str]:
    """Each device in two or more claims, with the claims."""
    holders: dict[str, list[str]] = {}
    for claim, devices in claims.items():
        for d in devices:
            holders.setdefault(d, []).append(claim)
    return [f"{d} in {', '.join(sorted(cs))}" for d, cs in sorted(holders.items()) if len(cs) > 1]


def bound(cp: ControlPlane, ns: str, prefix: str) -> int:
    return sum(
        1
        for p in cp.pods(ns)
        if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName")
    )


def one_run(
    cp: ControlPlane,
    run: int,
    settled: Callable[[], bool],
    figures: Figures,
    *,
    tolerate: bool = False,
) -> None:
    """The mixed workload once; every claim sampled until `settled` holds (and once
    more after), each device in two claims recorded; then everything deleted."""
    start = time.monotonic()
    for i in range(GPUS):
        trainingjob(cp, f"r{run}-{i}", workers=1, gpu=1, cpu="100m", memory="64Mi")
    time.sleep(random.uniform(0.5, 1.0))  # the workload: theirs come 0.5-1 s later
    for i in range(GPUS):
        cp.core.create_namespaced_pod("default", theirs(i, run, tolerate=tolerate))

    def sample() -> bool:
        figures.samples += 1
        figures.doubles.extend(f"run {run}: {d}" for d in doubles(allocations(cp)))
        return settled()

    try:
        eventually(sample, timeout=120, what=f"run {run} settles")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{state(cp)}") from None
    figures.seconds.append(time.monotonic() - start)
    sample()
    figures.runs += 1
    cp.custom.delete_collection_namespaced_custom_object(
        "shoal.dev", "v1alpha1", JOBS_NS, "trainingjobs"
    )
    cp.core.delete_collection_namespaced_pod("default", grace_period_seconds=0)
    # The next run starts on a node whose every device is free again: the pods gone
    # and their claims deallocated and deleted (garbage collector, resourceclaim
    # controller).
    eventually(
        lambda: not cp.pods(JOBS_NS) and not cp.pods("default") and not allocations(cp),
        timeout=120,
    )


def state(cp: ControlPlane) -> str:
    """The pods and claims, for a run that does not settle."""
    lines = [f"claims: {allocations(cp)}"]
    for ns in (JOBS_NS, "default"):
        for p in cp.pods(ns):
            conds = [
                (c["type"], c["status"], c.get("message", ""))
                for c in p["status"].get("conditions") or []
            ]
            lines.append(f"{ns}/{p['metadata']['name']} on {p['spec'].get('nodeName')}: {conds}")
    return "\n".join(lines)


def allocated_to(claims: dict[str, list[str]], ns: str) -> int:
    return sum(1 for k, devices in claims.items() if k.startswith(f"{ns}/") and devices)


def waiting_on_taint(cp: ControlPlane, run: int) -> int:
    """kube-scheduler's pods of `run` it refused for the pool's taint."""
    n = 0
    for p in cp.pods("default"):
        if not p["metadata"]["name"].startswith(f"ks-{run}-"):
            continue
        for c in p["status"].get("conditions") or []:
            if c["type"] == "PodScheduled" and "untolerated taint" in c.get("message", ""):
                n += 1
    return n


def test_on_shoals_own_pool_no_device_is_in_two_claims(
    beside: ControlPlane, shoal_beside: Shoal
) -> None:
    the_node(beside, pool=True)
    eventually(lambda: [n.gpu_count for n in shoal_beside.runtime.backend.nodes()] == [GPUS], 60)
    figures = Figures()
    for run in range(RUNS):

        def settled(run: int = run) -> bool:
            claims = allocations(beside)
            return (
                bound(beside, JOBS_NS, "") == GPUS
                and allocated_to(claims, JOBS_NS) == GPUS
                and waiting_on_taint(beside, run) == GPUS
            )

        one_run(beside, run, settled, figures)
    log.warning("Shoal's own pool: %s", figures)
    print(f"\nShoal's own pool: {figures}")
    assert figures.runs == RUNS and not figures.doubles, figures.doubles


def test_on_a_shared_node_kube_scheduler_allocates_and_shoal_says_why_it_waits(
    beside: ControlPlane, shoal_beside: Shoal
) -> None:
    the_node(beside, pool=False)
    backend = shoal_beside.runtime.backend
    eventually(lambda: NODE in backend.excluded_nodes(), 60)
    assert "outside Shoal's node pool" in backend.excluded_nodes()[NODE]
    figures, shoal_took = Figures(), list[str]()
    for run in range(RUNS):

        def settled(run: int = run) -> bool:
            claims = allocations(beside)
            if allocated_to(claims, JOBS_NS) or bound(beside, JOBS_NS, ""):
                shoal_took.append(f"run {run}: {claims}")  # never, on a shared node
            if bound(beside, "default", f"ks-{run}-") < GPUS:
                return False
            reasons = [
                (beside.tj(f"r{run}-{i}").get("status") or {}).get("reason") or ""
                for i in range(GPUS)
            ]
            return all(f"node {NODE}: its GPUs are DRA devices outside" in r for r in reasons)

        one_run(beside, run, settled, figures)
    log.warning("shared node: %s", figures)
    print(f"\nshared node: {figures}")
    assert figures.runs == RUNS and not figures.doubles, figures.doubles
    assert not shoal_took, shoal_took[:3]


@pytest.mark.xfail(
    reason="a known gap (docs/kubernetes.md, 'One allocator per DRA device'): Shoal's "
    "check misses a kube-scheduler write that lands after its LIST, and when Shoal "
    "releases a device held twice, kube-scheduler counts it free and gives it again",
    strict=False,
)
def test_misconfigured_kube_schedulers_pods_on_the_pool_end_with_no_device_twice(
    beside: ControlPlane, shoal_beside: Shoal
) -> None:
    """Both allocate on the pool node (kube-scheduler's pods tolerate every taint, as a
    DaemonSet's do): the check after allocation is all that stands between them.
    Measured; the end state of every run should hold no device twice."""
    the_node(beside, pool=True)
    eventually(lambda: [n.gpu_count for n in shoal_beside.runtime.backend.nodes()] == [GPUS], 60)
    figures, final = Figures(), list[str]()
    for run in range(RUNS):

        def settled(run: int = run) -> bool:
            claims = allocations(beside)
            mine = allocated_to(claims, JOBS_NS)
            ks = [
                p for p in beside.pods("default") if p["metadata"]["name"].startswith(f"ks-{run}-")
            ]
            ks_done = all(
                p["spec"].get("nodeName")
                or any(c["type"] == "PodScheduled" and c["status"] == "False"
                       for c in p["status"].get("conditions") or [])
                for p in ks
            )  # fmt: skip
            return (
                len(ks) == GPUS
                and ks_done
                and mine + allocated_to(claims, "default") >= GPUS
                and bound(beside, JOBS_NS, "") == mine
            )

        def end_state(run: int = run) -> bool:
            final.extend(f"run {run}: {d}" for d in doubles(allocations(beside)))
            return settled(run)

        one_run(beside, run, lambda e=end_state: e(), figures, tolerate=True)
    log.warning("misconfigured pool: %s; at the end of a run: %s", figures, final)
    print(f"\nmisconfigured pool: {figures}; at the end of a run: {len(final)}: {final[:4]}")
    assert figures.runs == RUNS and not final, final
