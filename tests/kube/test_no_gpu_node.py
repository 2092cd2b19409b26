"""A node where the GPU the device plugin allocates never reaches the container (a
missing RuntimeClass, CDI without the runtime's support): the reservation pod finds no
GPU, says why (exit 3, termination message), and the node offers no fractions, with
that reason, rather than more shares that cannot run (issue 10.3); its whole GPUs stay
offered (issue 24)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from scheduler.backends import base
from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.reservations import reserve

from .conftest import NS, eventually, job, node
from .fakeapi import FakeKube

Make = Callable[..., KubernetesBackend]
RES = "shoal-gpu-n1-g0"


def test_a_node_whose_reservation_finds_no_gpu_offers_no_fractions_with_the_reason(
    kube: FakeKube, make_backend: Make, tmp_path: Path
) -> None:
    kube.put("nodes", node("n1"))
    kube.put("nodes", node("n2"))
    b = make_backend()
    assert [n.name for n in eventually(b.nodes, timeout=30)] == ["n1", "n2"]
    b.launch(job("half", gpu=0.5, gpus_of=lambda w: (0,)))
    assert kube.obj("pods", RES, NS)["spec"]["containers"][0]["terminationMessagePolicy"] == (
        "FallbackToLogsOnError"
    )
    # The reserver in that pod: no NVML, no /proc/driver/nvidia entry, no variable (CDI).
    log = tmp_path / "termination-log"
    env = {
        "POD_NAME": RES,
        "POD_NAMESPACE": NS,
        "SHOAL_KUBE_HOST": kube.url,
        "SHOAL_TERMINATION_LOG": str(log),
    }
    assert reserve.main(env, wait=False) == reserve.NO_GPU_EXIT
    said = log.read_text()
    assert "NVIDIA_VISIBLE_DEVICES=(unset)" in said
    # The kubelet puts the termination message in the pod's status; the pod restarts.
    kube.update(
        "pods",
        RES,
        NS,
        {
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "reserve",
                        "ready": False,
                        "restartCount": 1,
                        "image": "shoal",
                        "imageID": "",
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {"terminated": {"exitCode": 3, "message": said}},
                    }
                ],
            }
        },
    )
    why = eventually(lambda: b.excluded_nodes().get("n1"), timeout=30)
    assert "found no GPU" in why and "NVIDIA_VISIBLE_DEVICES=(unset)" in why
    assert {n.name: n.no_sharing for n in b.nodes()} == {"n1": why, "n2": ""}
    # Its share is a failed worker, retried elsewhere without using up backoffLimit.
    (w,) = eventually(
        lambda: [w for w in b.workers() if w.state is base.WorkerState.FAILED], timeout=30
    )
    assert w.retryable and "found no GPU" in w.message
