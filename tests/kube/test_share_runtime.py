"""Issue 24 item 4: fractions beyond the legacy env-var path. Worker and reservation pods
take a RuntimeClass; a share's NVIDIA_VISIBLE_DEVICES may name its GPU by CDI device
name; the reserver reads a MIG slice's own UUID (never the parent card's from /proc) and
says how the device plugin handed it the GPU; a node where a share could not reach its
GPU (CDI, no worker RuntimeClass) has sharing turned off with the reason."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.builders import launch_request

from scheduler.backends.kubernetes import KubeConfig, KubernetesBackend
from scheduler.backends.kubernetes.pods import workerpod
from scheduler.backends.kubernetes.reservations import reservationpod, reserve
from scheduler.backends.kubernetes.runtime import with_options

from .conftest import NS, env_of, eventually, job, node
from .fakeapi import FakeKube

UUID = "GPU-5f0e6c4a-0b7e-4c1c-9a77-2b3c4d5e6f70"
MIG = "MIG-0a1b2c3d-4e5f-5a6b-8c7d-9e0f1a2b3c4d"
RES = "shoal-gpu-n1-g0"
NO_SMI = "/nonexistent/nvidia-smi"


def proc_tree(tmp_path: Path, uuid: str, *, mig: bool) -> tuple[str, str]:
    """(/proc/driver/nvidia/gpus, the MIG capability glob) of a container given one
    device: its parent card's entry, and a MIG slice's access file when `mig`."""
    gpus = tmp_path / "gpus" / "0000:01:00.0"
    gpus.mkdir(parents=True)
    (gpus / "information").write_text(f"Model: \t\t NVIDIA A100\nGPU UUID: \t {uuid}\n")
    caps = tmp_path / "capabilities" / "gpu0" / "mig" / "gi1"
    if mig:
        caps.mkdir(parents=True)
        (caps / "access").write_text("DeviceFileMinor: 12\n")
    return str(tmp_path / "gpus"), str(tmp_path / "capabilities" / "gpu*" / "mig" / "gi*")


def fake_smi(tmp_path: Path, listing: str) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{listing}\nEOF\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_mig_slice_is_never_named_by_its_parent_cards_proc_entry(tmp_path: Path) -> None:
    gpus, caps = proc_tree(tmp_path, UUID, mig=True)
    with pytest.raises(reserve.NoGpu, match="a MIG slice, whose parent card's UUID"):
        reserve.read_gpu_uuid({}, gpus, mig_caps=caps, smi=NO_SMI)
    # The device plugin's envvar strategy names the slice itself.
    env = {"NVIDIA_VISIBLE_DEVICES": MIG}
    assert reserve.read_gpu_uuid(env, gpus, mig_caps=caps, smi=NO_SMI) == MIG
    # Without MIG the card's own entry is its UUID (CDI and volume-mounts set no UUID).
    whole, no_caps = proc_tree(tmp_path / "whole", UUID, mig=False)
    assert reserve.read_gpu_uuid({}, whole, mig_caps=no_caps, smi=NO_SMI) == UUID


def test_nvidia_smi_gives_the_slice_it_lists(tmp_path: Path) -> None:
    gpus, caps = proc_tree(tmp_path, UUID, mig=True)
    smi = fake_smi(
        tmp_path,
        f"GPU 0: NVIDIA A100-SXM4-80GB (UUID: {UUID})\n  MIG 1g.10gb     Device  0: (UUID: {MIG})",
    )
    assert reserve.read_gpu_uuid({}, gpus, mig_caps=caps, smi=smi) == MIG
    (tmp_path / "two").mkdir()
    two = fake_smi(tmp_path / "two", f"GPU 0: A (UUID: {UUID})\nGPU 1: B (UUID: GPU-2)")
    whole, no_caps = proc_tree(tmp_path / "w", UUID, mig=False)
    assert reserve.read_gpu_uuid({}, whole, mig_caps=no_caps, smi=two) == UUID  # /proc's one


def test_the_reserver_says_how_the_gpu_reached_it() -> None:
    assert reserve.delivery({}) == "cdi"
    assert reserve.delivery({"NVIDIA_VISIBLE_DEVICES": "void"}) == "cdi"
    assert reserve.delivery({"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}) == (
        "volume-mounts"
    )
    assert reserve.delivery({"NVIDIA_VISIBLE_DEVICES": MIG}) == "envvar"


def test_worker_and_reservation_pods_take_the_runtime_class() -> None:
    cfg = KubeConfig(namespace=NS, runtime_class="nvidia")
    req = launch_request("j", gpu=0.5, gpus_of=lambda w: (0,))
    share = workerpod.worker_pod(req, req.placements[0], "j", NS, ["h"], cfg)
    assert share["spec"]["runtimeClassName"] == "nvidia"
    assert env_of(share)["NVIDIA_VISIBLE_DEVICES"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['shoal.dev/gpu-device']"}
    }
    assert reservationpod.reservation_pod("n1", 0, cfg)["spec"]["runtimeClassName"] == "nvidia"
    own = KubeConfig(namespace=NS, runtime_class="nvidia", reserve_runtime_class="nvidia-legacy")
    assert (
        reservationpod.reservation_pod("n1", 0, own)["spec"]["runtimeClassName"] == "nvidia-legacy"
    )
    bare = workerpod.worker_pod(req, req.placements[0], "j", NS, ["h"], KubeConfig(namespace=NS))
    assert "runtimeClassName" not in bare["spec"]


def test_the_options_name_the_runtime_class_and_a_valid_cdi_kind() -> None:
    cfg = with_options(
        KubeConfig(), {"workerRuntimeClass": "nvidia", "shareCdiKind": "runtime.nvidia.com/gpu"}
    )
    assert (cfg.runtime_class, cfg.share_cdi_kind) == ("nvidia", "runtime.nvidia.com/gpu")
    for bad in ("gpu", "nvidia.com/gpu=GPU-1", "Nvidia.com/gpu", "/gpu"):
        with pytest.raises(ValueError, match="is not a CDI kind"):
            with_options(KubeConfig(), {"shareCdiKind": bad})


def run_cdi_reserver(kube: FakeKube) -> None:
    """The reserver on a node whose device plugin uses CDI: no NVIDIA_VISIBLE_DEVICES."""
    env = {"POD_NAME": RES, "POD_NAMESPACE": NS, "SHOAL_KUBE_HOST": kube.url}
    uuid = reserve.read_gpu_uuid
    try:  # the driver's answer (NVML or /proc on a real node)
        reserve.read_gpu_uuid = lambda *a, **k: UUID  # type: ignore[assignment]
        assert reserve.main(env, wait=False) == 0
    finally:
        reserve.read_gpu_uuid = uuid  # type: ignore[assignment]
    ann = kube.obj("pods", RES, NS)["metadata"]["annotations"]
    assert ann["shoal.dev/gpu-delivery"] == "cdi"


def test_a_cdi_node_without_a_worker_runtime_class_does_not_share(
    kube: FakeKube, make_backend: Callable[..., KubernetesBackend]
) -> None:
    kube.put("nodes", node("n1"))
    b = make_backend(reconcile_interval_s=0.05)
    b.launch(job("cdi", gpu=0.5, gpus_of=lambda w: (0,)))
    run_cdi_reserver(kube)
    why = eventually(lambda: b.workers() and b.excluded_nodes().get("n1"))
    assert why.startswith(
        "GPU sharing is off on n1: GPU reservation shoal-gpu-n1-g0 got its GPU by CDI"
    )
    assert "workerRuntimeClassName" in why and "whole GPUs are still offered" in why
    (w,) = b.workers()
    assert w.retryable and "got its GPU by CDI" in w.message
    assert [n.no_sharing for n in b.nodes()] == [why]
    time.sleep(0.3)  # the share is never bound: it would see no GPU
    assert not kube.obj("pods", "cdi-a0-w0", NS)["spec"].get("nodeName")


def test_with_a_worker_runtime_class_a_cdi_node_shares(
    kube: FakeKube, make_backend: Callable[..., KubernetesBackend]
) -> None:
    kube.put("nodes", node("n1"))
    b = make_backend(runtime_class="nvidia", share_cdi_kind="nvidia.com/gpu")
    b.launch(job("cdi", gpu=0.5, gpus_of=lambda w: (0,)))
    run_cdi_reserver(kube)
    eventually(lambda: kube.obj("pods", "cdi-a0-w0", NS)["spec"].get("nodeName") == "n1")
    pod = kube.obj("pods", "cdi-a0-w0", NS)
    assert pod["metadata"]["annotations"]["shoal.dev/gpu-device"] == f"nvidia.com/gpu={UUID}"
    assert pod["spec"]["runtimeClassName"] == "nvidia"
    assert not b.excluded_nodes()


@pytest.mark.skipif(os.name != "posix", reason="a shell script stands in for nvidia-smi")
def test_a_failing_nvidia_smi_is_not_an_answer(tmp_path: Path) -> None:
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    path.chmod(0o755)
    gpus, caps = proc_tree(tmp_path, UUID, mig=False)
    assert reserve.read_gpu_uuid({}, gpus, mig_caps=caps, smi=str(path)) == UUID
