"""Nodes whose device plugin shares GPUs by MPS (`nvidia.com/gpu.sharing-strategy=mps`,
`nvidia.com/gpu.replicas=N`): counted as their physical GPUs of N enforced slices; a
fraction there is one replica (`nvidia.com/gpu: 1`) that the device plugin picks and
enforces, with no reservation pod; time-slicing stays excluded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from scheduler.backends import base
from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.view import inventory
from scheduler.model import Enforcement, Node, WorkerPlacement

from .conftest import NS, env_of, eventually, job, node, pod
from .fakeapi import FakeKube

Make = Callable[..., KubernetesBackend]


def mps_node(name: str, cards: int = 2, replicas: int = 4) -> dict[str, object]:
    """As GFD labels a node of the NVIDIA device plugin with `sharing.mps.replicas`."""
    obj = node(name, gpus=cards * replicas, product="NVIDIA-A100-SXM4-80GB-SHARED")
    labels = obj["metadata"]["labels"]  # type: ignore[index]
    labels.update(
        {
            "nvidia.com/gpu.count": str(cards),
            "nvidia.com/gpu.replicas": str(replicas),
            "nvidia.com/gpu.sharing-strategy": "mps",
        }
    )
    return obj


def test_an_mps_node_is_its_cards_in_enforced_slices() -> None:
    n = inventory.to_node(mps_node("m"))
    assert inventory.unschedulable_reason(mps_node("m")) is None
    assert replace(n, labels={}) == Node("m", 64000, 512 * 1024, 2, "NVIDIA-A100-SXM4-80GB",
                                         81920, Enforcement.MPS, 4)  # fmt: skip
    # A foreign pod's replica may sit on either card: one card fewer is offered.
    assert inventory.to_node(mps_node("m"), (0, 0, 1)).gpu_count == 1
    time_sliced = mps_node("t")
    time_sliced["metadata"]["labels"]["nvidia.com/gpu.sharing-strategy"] = "time-slicing"  # type: ignore[index]
    assert "time-sliced" in (inventory.unschedulable_reason(time_sliced) or "")


def test_a_fraction_on_an_mps_node_is_one_replica_without_a_reservation(
    kube: FakeKube, make_backend: Make
) -> None:
    kube.put("nodes", mps_node("n1"))
    b = make_backend()
    assert eventually(b.nodes)[0].slices == 4
    b.launch(job("q", gpu=0.25, gpus_of=lambda w: (0,)))
    (worker,) = kube.objects("pods", NS)  # no reservation pod beside it
    container = worker["spec"]["containers"][0]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = env_of(worker)
    assert "NVIDIA_VISIBLE_DEVICES" not in env  # the device plugin's, with the MPS pipe
    assert (env["SHOAL_GPU_FRACTION"], env["SHOAL_GPU_ENFORCEMENT"]) == ("0.2500", "mps")
    ann = worker["metadata"]["annotations"]
    assert (ann["shoal.dev/gpu-enforcement"], ann["shoal.dev/gpu-replica"]) == ("mps", "1")
    assert "shoal.dev/reservation" not in worker["metadata"]["labels"]
    eventually(lambda: kube.obj("pods", worker["metadata"]["name"], NS)["spec"].get("nodeName"))
    alloc = eventually(lambda: b.allocations().get("q"))
    assert alloc.placements == (WorkerPlacement(0, "n1", (0,), 0.25),)


def test_a_foreign_fraction_is_not_bound_to_an_mps_node(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", mps_node("n1"))
    kube.put(
        "pods",
        pod(
            "notebook",
            phase="Pending",
            scheduler="shoal",
            labels={"shoal.dev/queue": "research"},
            annotations={"shoal.dev/gpu-fraction": "0.25"},
        ),
    )
    b = make_backend()
    (nb,) = eventually(b.foreign_pods)
    with pytest.raises(base.BackendError, match="MPS replicas"):
        b.bind(nb, WorkerPlacement(0, "n1", (0,), 0.25))
    assert not kube.obj("pods", "notebook", "default")["spec"].get("nodeName")
