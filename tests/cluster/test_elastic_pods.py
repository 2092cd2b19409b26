"""An elastic job's attempt resized in place (`Resizable`) on a real kube-apiserver with
kwok nodes: launched at 2 workers, grown to 4 (the new pods only, bound, behind the same
headless Service, in the same PodGroup whose `minCount` stays the job's `min`), shrunk
back to 2 (just the named workers' pods go, with their grace; the others are the same
pods, untouched), and a repeat of each call changes nothing. On a node whose GPUs a DRA
driver publishes, the new workers get claims of their own, which go with their pods;
fractional workers' GPU reservation comes with a grow and goes with the shrink.

Run alone: `.venv/bin/pytest -o addopts="" tests/cluster/test_elastic_pods.py`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from support.builders import launch_request as job

from scheduler.backends.base import BackendError, LaunchRequest, StopReason
from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.spec import JobSpec

from .conftest import JOBS_NS, RESERVATIONS_NS, ControlPlane, eventually
from .test_dra import claims, dra_node, results
from .test_launch import env_of, event_reasons, services

pytestmark = pytest.mark.cluster
Make = Callable[..., KubernetesBackend]
Obj = dict[str, Any]
GRACE = 5


def elastic(
    name: str, size: int, lo: int = 2, hi: int = 4, gpu: float = 1, per_gpu: int = 1
) -> LaunchRequest:
    """An attempt of the elastic job `name` (`workers: {min: lo, max: hi}`) at `size`
    workers on n1, `gpu` each: `per_gpu` workers to a GPU (worker w on GPU w // per_gpu)."""
    req = job(name, workers=size, gpu=gpu, gpus_of=lambda w: (w // per_gpu,))
    spec = req.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    spec["workers"] = {"min": lo, "max": hi}
    return LaunchRequest(
        job_id=req.job_id,
        spec=JobSpec.model_validate(spec),
        attempt=req.attempt,
        placements=req.placements,
        extra_env=req.extra_env,
    )


def by_worker(cp: ControlPlane, name: str) -> dict[int, Obj]:
    return {int(p["metadata"]["labels"]["shoal.dev/worker-index"]): p for p in cp.job_pods(name)}


def uids(pods: dict[int, Obj]) -> dict[int, str]:
    return {w: p["metadata"]["uid"] for w, p in pods.items()}


def bound(cp: ControlPlane, name: str, size: int) -> dict[int, Obj] | None:
    pods = by_worker(cp, name)
    ok = sorted(pods) == list(range(size)) and all(
        p["spec"].get("nodeName") == "n1" and not p["metadata"].get("deletionTimestamp")
        for p in pods.values()
    )
    return pods if ok else None


def min_counts(cp: ControlPlane) -> dict[str, list[int]]:
    """kind -> the minCount of each object of that kind in the jobs namespace."""
    out = {}
    for kind in ("workloads", "podgroups"):
        items = json.loads(cp.kubectl("get", kind, "-n", JOBS_NS, "-o", "json").stdout)["items"]
        out[kind] = [
            (
                o["spec"]["schedulingPolicy"]
                if kind == "podgroups"
                else o["spec"]["podGroupTemplates"][0]["schedulingPolicy"]
            )["gang"]["minCount"]
            for o in items
        ]
    return out


def keep_terminating(cp: ControlPlane, name: str, workers: list[int]) -> None:
    """kwok keeps these pods Terminating for their whole grace period once deleted."""
    for w in workers:
        cp.core.patch_namespaced_pod(
            f"{name}-a0-w{w}",
            JOBS_NS,
            {"metadata": {"annotations": {"shoal.test/graceful": "true"}}},
        )


def test_an_elastic_attempt_grows_and_shrinks_in_place(
    cluster: ControlPlane, make_backend: Make
) -> None:
    cluster.add_node("n1", gpus=8)
    b = make_backend()
    assert b.capabilities().resizable is b
    b.launch(elastic("el", 2))
    first = uids(eventually(lambda: bound(cluster, "el", 2)))
    assert min_counts(cluster) == {"workloads": [2], "podgroups": [2]}

    b.grow(elastic("el", 4))
    pods = eventually(lambda: bound(cluster, "el", 4))
    assert {w: uids(pods)[w] for w in (0, 1)} == first  # the first two: the same pods
    assert services(cluster) == ["el"]
    assert min_counts(cluster) == {"workloads": [2], "podgroups": [2]}  # the gang: min
    rdzv = f"el-a0-w0.el.{JOBS_NS}.svc:29500"
    for w, p in pods.items():
        assert p["spec"]["schedulingGroup"] == {"podGroupName": "el-a0"}
        assert (p["spec"]["hostname"], p["spec"]["subdomain"]) == (f"el-a0-w{w}", "el")
        assert p["metadata"]["annotations"]["shoal.dev/gpus"] == str(w)
        env = env_of(p)
        assert (env["PET_NNODES"], env["PET_RDZV_ENDPOINT"]) == ("2:4", rdzv)
    assert {p["metadata"]["annotations"]["shoal.dev/workers"] for p in pods.values()} == {"2", "4"}
    grown = uids(pods)
    b.grow(elastic("el", 4))  # a repeat: nothing new, nothing touched
    assert uids(by_worker(cluster, "el")) == grown
    eventually(lambda: "Resized" in event_reasons(cluster))

    keep_terminating(cluster, "el", [2, 3])
    b.shrink("el", 0, [3, 2], GRACE)
    going = by_worker(cluster, "el")
    for w in (2, 3):
        meta = going[w]["metadata"]
        assert meta["deletionGracePeriodSeconds"] == GRACE, meta
        assert meta["annotations"]["shoal.dev/stop-reason"] == StopReason.RESIZED
    for w in (0, 1):
        assert not going[w]["metadata"].get("deletionTimestamp")
        assert "shoal.dev/stop-reason" not in going[w]["metadata"]["annotations"]
    # They report until gone; a grow back cannot reuse their names before that.
    eventually(lambda: {w.worker for w in b.workers()} == {0, 1, 2, 3})
    with pytest.raises(BackendError) as refused:
        b.grow(elastic("el", 4))
    assert refused.value.transient
    b.shrink("el", 0, [3, 2], GRACE)  # a repeat: the same deletion, no other
    assert by_worker(cluster, "el")[2]["metadata"]["deletionGracePeriodSeconds"] == GRACE
    left = eventually(lambda: bound(cluster, "el", 2), timeout=90)
    assert uids(left) == first
    eventually(lambda: {w.worker for w in b.workers()} == {0, 1})
    assert services(cluster) == ["el"]
    assert min_counts(cluster) == {"workloads": [2], "podgroups": [2]}
    b.shrink("el", 0, [3, 2], GRACE)  # once gone: nothing to do
    assert uids(by_worker(cluster, "el")) == first

    b.grow(elastic("el", 3))  # back up: worker 2 anew
    again = eventually(lambda: bound(cluster, "el", 3))
    assert uids(again)[2] != grown[2] and {w: uids(again)[w] for w in (0, 1)} == first


def test_on_a_dra_node_the_new_workers_get_claims_that_go_with_them(
    cluster: ControlPlane, make_backend: Make
) -> None:
    b = dra_node(cluster, make_backend, 4)
    b.launch(elastic("dr", 3))  # above its min: the gang is still its min
    first = uids(eventually(lambda: bound(cluster, "dr", 3)))
    assert min_counts(cluster) == {"workloads": [2], "podgroups": [2]}
    b.grow(elastic("dr", 4))
    eventually(lambda: bound(cluster, "dr", 4))
    got = claims(cluster)
    names = [f"dr-a0-w{w}-gpu" for w in range(4)]
    devices = [r["device"] for n in names for r in results(got[n])]
    assert len(devices) == 4 and len(set(devices)) == 4  # each its own GPU
    b.shrink("dr", 0, [3, 2], GRACE)
    eventually(lambda: bound(cluster, "dr", 2), timeout=90)
    eventually(lambda: set(claims(cluster)) == set(names[:2]), timeout=120)
    assert all(results(c) for c in claims(cluster).values())  # the first two still hold
    assert uids(by_worker(cluster, "dr")) == {w: first[w] for w in (0, 1)}


def reservations(cp: ControlPlane) -> dict[str, Obj]:
    return {p["metadata"]["name"]: p for p in cp.pods(RESERVATIONS_NS)}


def reserved(cp: ControlPlane, name: str) -> bool:
    """The reservation pod `name` is bound; it reports its GPU's UUID, as its reserver
    would on a real node."""
    pod = reservations(cp).get(name)
    if pod is None or not pod["spec"].get("nodeName"):
        return False
    ann = {"shoal.dev/gpu-uuid": f"GPU-{name}"}
    cp.core.patch_namespaced_pod(name, RESERVATIONS_NS, {"metadata": {"annotations": ann}})
    return True


def test_fractional_workers_a_grow_reserves_a_gpu_and_the_shrink_releases_it(
    cluster: ControlPlane, make_backend: Make
) -> None:
    cluster.add_node("n1", gpus=2)
    b = make_backend(reservation_grace_s=0)
    g0, g1 = "shoal-gpu-n1-g0", "shoal-gpu-n1-g1"
    b.launch(elastic("fr", 2, gpu=0.5, per_gpu=2))  # workers 0 and 1 share GPU 0
    eventually(lambda: reserved(cluster, g0), timeout=90)
    first = uids(eventually(lambda: bound(cluster, "fr", 2), timeout=90))
    b.grow(elastic("fr", 4, gpu=0.5, per_gpu=2))  # workers 2 and 3 share GPU 1
    eventually(lambda: reserved(cluster, g1), timeout=90)
    pods = eventually(lambda: bound(cluster, "fr", 4), timeout=90)
    assert pods[3]["metadata"]["annotations"]["shoal.dev/gpu-uuid"] == f"GPU-{g1}"
    b.shrink("fr", 0, [3, 2], GRACE)
    eventually(lambda: bound(cluster, "fr", 2), timeout=90)
    eventually(lambda: g1 not in reservations(cluster), timeout=90)  # its last shares went
    assert g0 in reservations(cluster)
    assert uids(by_worker(cluster, "fr")) == first
