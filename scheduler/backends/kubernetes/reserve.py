"""`shoal reserve`: the process inside a GPU reservation pod.

The device plugin gave this pod one whole GPU. This process finds that GPU's UUID
(through NVML when `pynvml` is importable, else from NVIDIA_VISIBLE_DEVICES, which the
NVIDIA device plugin sets to the UUID), writes it to its own pod's `shoal.dev/gpu-uuid`
annotation so that Shoal can point fractional workers at it, and then sleeps, holding
the GPU, until it is terminated. The CLI wires `shoal reserve` to `main()`.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import threading
from typing import Any

from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.api import Kube
from scheduler.backends.kubernetes.config import KubeConfig, api_client

log = logging.getLogger(__name__)


def read_gpu_uuid(environ: dict[str, str] | None = None) -> str:
    """The UUID of the one GPU this container sees."""
    env = os.environ if environ is None else environ
    try:
        nvml: Any = importlib.import_module("pynvml")
        nvml.nvmlInit()
        try:
            uuid = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(0))
            return uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        finally:
            nvml.nvmlShutdown()
    except Exception as e:  # no pynvml, no driver, no device: fall back to the env
        log.info("NVML unavailable (%s); reading NVIDIA_VISIBLE_DEVICES", e)
    visible = [d.strip() for d in env.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if len(visible) != 1 or visible[0] in ("all", "none", "void"):
        raise RuntimeError(f"expected exactly one GPU, NVIDIA_VISIBLE_DEVICES={visible!r}")
    return visible[0]


def announce(kube: Kube, namespace: str, pod: str, uuid: str) -> None:
    """Publish the UUID on the reservation pod (merge patch of one annotation)."""
    kube.patch("pods", pod, {"metadata": {"annotations": {names.GPU_UUID: uuid}}}, namespace)
    log.info("pod %s/%s holds GPU %s", namespace, pod, uuid)


def main(environ: dict[str, str] | None = None, wait: bool = True) -> int:
    """Read the UUID, announce it, then hold the GPU until SIGTERM. Returns an exit code."""
    env = dict(os.environ if environ is None else environ)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    pod, namespace = env.get("POD_NAME"), env.get("POD_NAMESPACE")
    if not pod or not namespace:
        log.error("POD_NAME and POD_NAMESPACE must be set (downward API)")
        return 2
    try:
        uuid = read_gpu_uuid(env)
    except RuntimeError as e:
        log.error("%s", e)
        return 1
    config = KubeConfig(namespace=namespace, host=env.get("SHOAL_KUBE_HOST"))
    announce(Kube(api_client(config), config), namespace, pod, uuid)
    if wait:
        done = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: done.set())
        done.wait()
    return 0
