"""Issue 36 item 6 on the real API server (1.37.2, kwok as the kubelet): a share whose
container got no GPU (the runtime did not honour NVIDIA_VISIBLE_DEVICES for it) checks in
from its init container (`share-check`, Shoal's image), whatever the job's command,
exits 75 saying why, and the job is retried without using up backoffLimit while sharing
is off on that node, the fraction waiting with the reason. kwok runs no process: the
check's real message (over an empty /dev, with the init container's own environment) is
handed to kwok's `pod-init-fail` stage, which reports it as the kubelet would (the pod
Failed, the init container terminated 75 with that message, the worker never started)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import watch

from scheduler.worker import checkin

from .conftest import JOBS_NS, RESERVATIONS_NS, ControlPlane, Shoal, eventually
from .test_jobs import queue, trainingjob

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
UUID = "GPU-5f0e6c4a-0b7e-4c1c-9a77-2b3c4d5e6f70"
COMMAND = ["torchrun", "--nproc-per-node=1", "train.py"]  # no launcher: checked all the same
CHECK = "share-check"


def test_a_share_that_sees_no_gpu_is_retried_and_turns_sharing_off(
    cluster: ControlPlane,
    shoal_env: dict[str, str],
    start_shoal: Callable[..., Shoal],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster.add_node("kw-s1", gpus=2)
    queue(cluster)
    shoal = start_shoal(shoal_env)
    trainingjob(cluster, "half", workers=1, gpu=0.5, backoffLimit=0, command=COMMAND)
    res = "shoal-gpu-kw-s1-g0"

    def reservation() -> Obj | None:
        got = [p for p in cluster.pods(RESERVATIONS_NS) if p["metadata"]["name"] == res]
        return got[0] if got and got[0]["spec"].get("nodeName") else None

    eventually(reservation, timeout=90, what="reservation bound")
    job_id = eventually(lambda: cluster.tj("half").get("status", {}).get("jobId"), 60)
    # The share exists, unbound until its reservation reports the GPU's UUID.
    (share,) = eventually(lambda: cluster.job_pods(job_id), 60, what="the share created")
    assert not share["spec"].get("nodeName")
    (init,) = share["spec"]["initContainers"]  # the API server took it
    (worker,) = share["spec"]["containers"]
    assert init["name"] == CHECK and init["command"] == ["python", "-m", "scheduler.worker.checkin"]
    assert worker["command"] == COMMAND
    assert {e["name"]: e.get("value") for e in worker["env"]}[checkin.CHECKED_ENV] == CHECK

    # The check in that init container, with the env the kubelet resolves for it.
    env = {e["name"]: e.get("value", "") for e in init["env"]}
    env["NVIDIA_VISIBLE_DEVICES"] = UUID  # the annotation Shoal sets before the bind
    assert env[checkin.RESERVATION_ENV] == res
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # the image has none
    env["SHOAL_TERMINATION_LOG"] = str(tmp_path / "termination-log")
    assert checkin.check(env, dev=str(tmp_path)) == checkin.NO_GPU_EXIT
    said = (tmp_path / "termination-log").read_text()
    name = share["metadata"]["name"]
    fail = {"shoal.test/init-fail": CHECK, "shoal.test/init-exit": "75"}
    fail["shoal.test/init-message"] = said
    marked = cluster.core.patch_namespaced_pod(
        name, JOBS_NS, {"metadata": {"annotations": fail}}
    ).metadata.resource_version
    ann = {"shoal.dev/gpu-uuid": UUID, "shoal.dev/gpu-delivery": "envvar"}  # the reserver's
    cluster.core.patch_namespaced_pod(res, RESERVATIONS_NS, {"metadata": {"annotations": ann}})

    def excluded() -> str | None:
        why = shoal.runtime.backend.excluded_nodes().get("kw-s1")
        return why if why and "share sees no GPU" in why else None

    why = eventually(excluded, 90, what=str(shoal.runtime.backend.excluded_nodes()))
    assert why.startswith(f"GPU sharing is off on kw-s1: its share {JOBS_NS}/{name}: "), why
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged" in why
    # As kwok reported it: the pod Failed by its init container, the worker never ran.
    # Replayed from before the bind: the retry may have deleted the pod already.
    (st,) = failed_init(cluster, name, marked)
    assert st.state.terminated.exit_code == 75 and st.name == CHECK

    # Retried (backoffLimit 0 is not used up), and the fraction waits saying why.
    def reason() -> str | None:
        st = cluster.tj("half").get("status", {})
        text = str(st.get("reason") or "")
        return text if st.get("phase") == "Pending" and "sharing is off" in text else None

    text = eventually(reason, 90, what=shoal.diagnose())
    assert "share sees no GPU" in text, text
    assert cluster.tj("half")["status"]["phase"] != "Failed"


def failed_init(cluster: ControlPlane, name: str, since: str) -> list[Any]:
    """The init container statuses of the pod `name` when it turned Failed, read from a
    watch that replays its changes since resourceVersion `since`."""
    stream = watch.Watch().stream(
        cluster.core.list_namespaced_pod,
        JOBS_NS,
        field_selector=f"metadata.name={name}",
        resource_version=since,
        timeout_seconds=10,
    )
    for event in stream:
        status = event["object"].status
        if status.phase == "Failed":
            return list(status.init_container_statuses or [])
    raise AssertionError(f"{name} was never seen Failed since resourceVersion {since}")
