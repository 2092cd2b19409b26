"""GPU reservation pods in a namespace of their own (`reserve_namespace`, the chart's
`reservations.namespace`): made, read, swept and released there, while the shares they
serve run in the jobs namespace."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.reservations import reserve

from .conftest import NS, eventually, job, node
from .fakeapi import FakeKube

Make = Callable[..., KubernetesBackend]
RES_NS = "gpu-reservations"
RES = "shoal-gpu-n1-g0"
UUID = "GPU-5f0e6c4a-0b7e-4c1c-9a77-2b3c4d5e6f70"


def test_reservations_live_in_their_own_namespace(kube: FakeKube, make_backend: Make) -> None:
    kube.put("nodes", node("n1"))
    b = make_backend(reserve_namespace=RES_NS)
    b.launch(job("a", gpu=0.5, gpus_of=lambda w: (0,)))
    b.launch(job("b", gpu=0.5, gpus_of=lambda w: (0,)))
    assert kube.get("pods", RES, NS) is None
    res = kube.obj("pods", RES, RES_NS)
    assert res["spec"]["nodeName"] == "n1"
    env = {"POD_NAME": RES, "POD_NAMESPACE": RES_NS, "NVIDIA_VISIBLE_DEVICES": UUID}
    assert reserve.main({**env, "SHOAL_KUBE_HOST": kube.url}, wait=False) == 0
    for w in ("a-a0-w0", "b-a0-w0"):

        def bound(w: str = w) -> bool:
            return bool(kube.obj("pods", w, NS)["spec"].get("nodeName") == "n1")

        eventually(bound)
        assert kube.obj("pods", w, NS)["metadata"]["annotations"]["shoal.dev/gpu-uuid"] == UUID
    assert eventually(b.nodes)[0].gpu_count == 8  # the reservation is not a foreign pod
    b.stop("a", 0)
    assert kube.get("pods", RES, RES_NS) is not None  # b still shares it
    b.stop("b", 0)
    eventually(lambda: kube.get("pods", RES, RES_NS) is None)


def test_a_reservation_left_in_the_old_namespace_is_swept(
    kube: FakeKube, make_backend: Make
) -> None:
    """After `reservations.namespace` changes, one made before (in the jobs namespace)
    with no share left is still released: it holds a GPU."""
    kube.put("nodes", node("n1"))
    old = make_backend()
    old.launch(job("done", gpu=0.5, gpus_of=lambda w: (0,)))
    assert kube.get("pods", RES, NS) is not None
    old.close()
    kube.update("pods", "done-a0-w0", NS, {"status": {"phase": "Succeeded"}})
    make_backend(reserve_namespace=RES_NS)
    eventually(lambda: kube.get("pods", RES, NS) is None)
