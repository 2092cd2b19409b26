"""Issue 36 item 6: a share that checks in and sees no GPU (the container runtime did
not honour NVIDIA_VISIBLE_DEVICES for a container that requests no GPU) is failed as the
infrastructure's, and sharing goes off on its node with that reason, as a reservation
that found no GPU turns it off (tests/kube/test_no_gpu_node.py). It checks in from its
init container (`share-check`), or from the worker launcher in a pod made without one;
both are read alike."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scheduler.backends import base
from scheduler.backends.kubernetes import KubernetesBackend, names
from scheduler.worker import checkin

from .conftest import NS, env_of, eventually, job, node
from .fakeapi import FakeKube
from .test_fractional import RES, UUID, run_reserve

Make = Callable[..., KubernetesBackend]
Obj = dict[str, Any]
SHARE = "half-a0-w0"


def bound_share(kube: FakeKube, b: KubernetesBackend) -> Obj:
    b.launch(job("half", gpu=0.5, gpus_of=lambda w: (0,)))
    run_reserve(kube)
    return eventually(lambda: (p := kube.obj("pods", SHARE, NS))["spec"].get("nodeName") and p)


def container_env(pod: Obj, init: bool = False) -> dict[str, str]:
    """The worker container's (or the check's init container's) environment as the
    kubelet resolves it (the annotation)."""
    ann = pod["metadata"]["annotations"]
    if init:
        env = {e["name"]: e.get("value", e.get("valueFrom")) for e in init_container(pod)["env"]}
    else:
        env = env_of(pod)
    return {k: v if isinstance(v, str) else ann["shoal.dev/gpu-device"] for k, v in env.items()}


def init_container(pod: Obj) -> Obj:
    (check,) = pod["spec"]["initContainers"]
    assert check["name"] == names.SHARE_CHECK
    return dict(check)


def exited(
    kube: FakeKube, code: int, message: str, *, ago_s: float = 0.0, init: str | None = None
) -> None:
    """What the kubelet reports of the share's worker container that exited, or (`init`:
    its name) of an init container that failed, so the worker never started."""
    when = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=ago_s)
    done = {"exitCode": code, "reason": "Error", "message": message}
    done["finishedAt"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    worker: Obj = {"name": "worker", "ready": False, "restartCount": 0, "image": "train"}
    worker["imageID"] = ""
    status: Obj = {"phase": "Failed", "containerStatuses": [worker]}
    if init is None:
        worker["state"] = {"terminated": done}
    else:
        worker["state"] = {"waiting": {"reason": "PodInitializing"}}
        status["initContainerStatuses"] = [
            {
                "name": init,
                "ready": False,
                "restartCount": 0,
                "image": "ghcr.io/shoal-dev/shoal:latest",
                "imageID": "",
                "state": {"terminated": done},
            }
        ]
    kube.update("pods", SHARE, NS, {"status": status})


def failed(b: KubernetesBackend) -> base.WorkerStatus:
    (w,) = eventually(
        lambda: [w for w in b.workers() if w.state is base.WorkerState.FAILED], timeout=30
    )
    return w


def test_a_share_that_sees_no_gpu_fails_retryable_and_turns_sharing_off_on_its_node(
    kube: FakeKube, make_backend: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.put("nodes", node("n1"))
    kube.put("nodes", node("n2"))
    b = make_backend()
    eventually(b.nodes, timeout=30)
    pod = bound_share(kube, b)
    env = container_env(pod, init=True)
    assert env[checkin.RESERVATION_ENV] == RES and env["NVIDIA_VISIBLE_DEVICES"] == UUID
    # The check in its init container: the runtime made no /dev/nvidia<N>.
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)
    log = tmp_path / "termination-log"
    env["SHOAL_TERMINATION_LOG"] = str(log)
    assert checkin.check(env, dev=str(tmp_path)) == checkin.NO_GPU_EXIT
    exited(kube, checkin.NO_GPU_EXIT, log.read_text(), init=names.SHARE_CHECK)

    w = failed(b)
    assert w.retryable, w  # the infrastructure's: backoffLimit is not used up
    assert w.message.startswith(f"share sees no GPU: NVIDIA_VISIBLE_DEVICES={UUID}"), w.message
    why = eventually(lambda: b.excluded_nodes().get("n1"), timeout=30)
    assert why.startswith(f"GPU sharing is off on n1: its share {NS}/{SHARE}: share sees no GPU")
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged" in why
    assert "whole GPUs are still offered" in why
    assert {n.name: n.no_sharing for n in b.nodes()} == {"n1": why, "n2": ""}


def test_a_share_exiting_75_on_its_own_is_the_jobs_failure(
    kube: FakeKube, make_backend: Make
) -> None:
    """The exit code alone is not the check-in's: a command may exit 75 too."""
    kube.put("nodes", node("n1"))
    b = make_backend()
    eventually(b.nodes, timeout=30)
    bound_share(kube, b)
    exited(kube, checkin.NO_GPU_EXIT, "")
    w = failed(b)
    assert not w.retryable and w.exit_code == checkin.NO_GPU_EXIT
    assert not b.excluded_nodes()


def test_an_old_check_in_failure_does_not_turn_sharing_off_again(
    kube: FakeKube, make_backend: Make
) -> None:
    """A failed share stays in the cache for finished_ttl_s: it turns sharing off for
    sharing_retry_s after it exited, not again after that (nor after a restart)."""
    kube.put("nodes", node("n1"))
    b = make_backend(sharing_retry_s=60.0)
    eventually(b.nodes, timeout=30)
    bound_share(kube, b)
    said = f"{checkin.PREFIX}: NVIDIA_VISIBLE_DEVICES={UUID} but no /dev/nvidia<N> device"
    exited(kube, checkin.NO_GPU_EXIT, said, ago_s=120)
    assert failed(b).retryable
    assert not b.excluded_nodes()
    exited(kube, checkin.NO_GPU_EXIT, said, ago_s=30)  # within the minute: off
    assert "its share" in eventually(lambda: b.excluded_nodes().get("n1"), timeout=30)


def test_a_share_made_without_the_init_container_is_read_from_its_launcher(
    kube: FakeKube, make_backend: Make
) -> None:
    """A pod made before the init container existed checks in from the worker launcher:
    its worker container's exit 75 and message are read the same way."""
    kube.put("nodes", node("n1"))
    b = make_backend()
    eventually(b.nodes, timeout=30)
    bound_share(kube, b)
    said = f"{checkin.PREFIX}: NVIDIA_VISIBLE_DEVICES={UUID} but no /dev/nvidia<N> device"
    exited(kube, checkin.NO_GPU_EXIT, said)
    assert failed(b).retryable
    assert "its share" in eventually(lambda: b.excluded_nodes().get("n1"), timeout=30)


@pytest.mark.parametrize(
    ("code", "message", "init"),
    [
        (1, "Traceback (most recent call last): ...", names.SHARE_CHECK),
        (checkin.NO_GPU_EXIT, "", names.SHARE_CHECK),
        # Only Shoal's own init container's words count: another's are the job's.
        (checkin.NO_GPU_EXIT, f"{checkin.PREFIX}: said by someone else", "setup"),
    ],
    ids=["check crashed", "75 without the message", "another init container"],
)
def test_any_other_init_container_failure_is_the_jobs(
    kube: FakeKube, make_backend: Make, code: int, message: str, init: str
) -> None:
    kube.put("nodes", node("n1"))
    b = make_backend()
    eventually(b.nodes, timeout=30)
    bound_share(kube, b)
    exited(kube, code, message, init=init)
    w = failed(b)
    assert not w.retryable and w.exit_code == code, w
    assert w.message.startswith(f"init container {init}: Error"), w.message
    assert not b.excluded_nodes()


def test_a_share_whose_check_cannot_start_says_why_while_it_waits(
    kube: FakeKube, make_backend: Make
) -> None:
    """Shoal's image not pullable for the init container (a private reserveImage): the
    worker stays bound and Pending, and its status names the init container and why."""
    kube.put("nodes", node("n1"))
    b = make_backend()
    eventually(b.nodes, timeout=30)
    bound_share(kube, b)
    held = {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}
    waiting = {"name": "worker", "ready": False, "restartCount": 0, "image": "train"}
    waiting |= {"imageID": "", "state": {"waiting": {"reason": "PodInitializing"}}}
    check = {**waiting, "name": names.SHARE_CHECK, "state": {"waiting": held}}
    status = {"phase": "Pending", "containerStatuses": [waiting]}
    status["initContainerStatuses"] = [check]
    kube.update("pods", SHARE, NS, {"status": status})

    def said() -> str | None:
        (w,) = b.workers()
        return w.message if "ImagePullBackOff" in w.message else None

    text = eventually(said, timeout=30)
    assert text == f"init container {names.SHARE_CHECK}: ImagePullBackOff: Back-off pulling image"
    (w,) = b.workers()
    assert w.state is base.WorkerState.PENDING and not w.retryable
