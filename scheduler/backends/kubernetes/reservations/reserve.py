"""The process inside a GPU reservation pod:
`python -m scheduler.backends.kubernetes.reservations.reserve`.

The device plugin gave this pod one whole GPU (or one MIG slice). This process reads that
device's UUID from the driver, publishes it on its own pod as the `shoal.dev/gpu-uuid`
annotation (so that Shoal can point fractional workers at it), then sleeps, holding the
GPU, until SIGTERM.

It must stay tiny: it runs in a pod with a small memory limit on every shared GPU. It
imports the standard library only (no CLI, no `kubernetes` client: one merge patch over
HTTPS with the pod's service-account token) and, when installed, `pynvml` (the
nvidia-ml-py package). Its peak RSS is measured in docs/kubernetes.md.

Where the UUID comes from, first that works:
  1. NVML (`pynvml`): the one device this container sees (a MIG device if MIG is on);
  2. `nvidia-smi -L` (the runtime mounts it with the `utility` capability): the one MIG
     device it lists, else the one GPU;
  3. NVIDIA_VISIBLE_DEVICES, only when it is itself one UUID (the envvar strategy names
     a MIG slice by its own `MIG-…` UUID);
  4. `/proc/driver/nvidia/gpus/*/information` ("GPU UUID:"): the container runtime mounts
     only the allocated GPU's entry, whatever the device plugin's strategy (envvar,
     volume-mounts or CDI); but for a MIG slice that is its parent card's UUID, so it is
     not used when the container was given a MIG slice (`/proc/driver/nvidia/capabilities/
     gpu*/mig/gi*`): a share pointed at the parent would see the whole card.
Only `GPU-…` or `MIG-…` is accepted: a path (volume-mounts), an index, `all`, or
nothing (CDI sets no variable) is refused with exit code 3 (`NO_GPU_EXIT`) and a message
saying why, written to the termination log too: Shoal reads it from the pod's status and
excludes the node, with that reason, since the GPU the device plugin allocated does not
reach containers there as configured. Other failures exit with 1.

With the UUID it publishes how the GPU reached it (`delivery`, the `shoal.dev/gpu-delivery`
annotation): under a CDI strategy a share, which requests no GPU, gets one only from the
NVIDIA runtime, so Shoal shares such a node's GPUs only with a worker RuntimeClass.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import json
import logging
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("shoal.reserve")
GPU_UUID_ANNOTATION = "shoal.dev/gpu-uuid"  # = names.GPU_UUID (not imported: stay small)
DELIVERY_ANNOTATION = "shoal.dev/gpu-delivery"  # = names.GPU_DELIVERY
UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z][0-9A-Za-z/-]*$")
SMI_UUID = re.compile(r"\(UUID: ((?:GPU|MIG)-[^)\s]+)\)")
PROC_GPUS = "/proc/driver/nvidia/gpus"
MIG_CAPS = "/proc/driver/nvidia/capabilities/gpu*/mig/gi*"  # a MIG slice's access files
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
NO_GPU_EXIT = 3  # the container saw no single GPU: Shoal excludes the node (shares.py)
TERMINATION_LOG = "/dev/termination-log"  # the kubelet's default terminationMessagePath


class NoGpu(RuntimeError):
    """No single GPU UUID could be read; the message says what was seen."""


def is_gpu_uuid(text: str) -> bool:
    return bool(UUID_RE.match(text))


def _nvml_uuid() -> str | None:
    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
    except Exception as e:  # no driver library, no device
        log.info("NVML unavailable: %s", e)
        return None
    try:
        count = int(nvml.nvmlDeviceGetCount()) if hasattr(nvml, "nvmlDeviceGetCount") else 1
        if count != 1:
            raise NoGpu(f"NVML sees {count} GPUs; a reservation must see exactly one")
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        try:  # a MIG slice: its own UUID, not its parent's
            current, _ = nvml.nvmlDeviceGetMigMode(handle)
            if current:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
        except Exception:  # no MIG support in this GPU or binding
            pass
        uuid = nvml.nvmlDeviceGetUUID(handle)
        return uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _proc_uuids(root: str = PROC_GPUS) -> list[str]:
    found = []
    for path in sorted(glob.glob(os.path.join(root, "*", "information"))):
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key.strip() == "GPU UUID":
                        found.append(value.strip())
        except OSError:
            continue
    return found


def _smi_uuid(smi: str = "nvidia-smi") -> tuple[str | None, str | None]:
    """(the UUID `nvidia-smi -L` gives this container's one device, what it said
    otherwise): its one MIG device, else its one GPU; (None, None) without nvidia-smi."""
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None, None
    found = SMI_UUID.findall(out.stdout)
    mig = [u for u in found if u.startswith("MIG-")]
    one = mig if mig else found
    if out.returncode == 0 and len(one) == 1:
        return one[0], None
    return None, f"nvidia-smi -L listed {len(mig) or len(found)} {'MIG devices' if mig else 'GPUs'}"


def read_gpu_uuid(
    environ: Mapping[str, str] | None = None,
    proc_root: str = PROC_GPUS,
    *,
    mig_caps: str = MIG_CAPS,
    smi: str = "nvidia-smi",
) -> str:
    """The UUID of the one GPU (or MIG slice) this container holds (see the module doc),
    or NoGpu."""
    env = os.environ if environ is None else environ
    seen: list[str] = []
    uuid = _nvml_uuid()
    if uuid is not None:
        if is_gpu_uuid(uuid):
            return uuid
        seen.append(f"NVML gave {uuid!r}")
    uuid, said = _smi_uuid(smi)
    if uuid is not None:
        return uuid
    if said:
        seen.append(said)
    visible = [d.strip() for d in env.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if len(visible) == 1 and is_gpu_uuid(visible[0]):
        return visible[0]
    seen.append(f"NVIDIA_VISIBLE_DEVICES={','.join(visible) or '(unset)'}")
    proc = _proc_uuids(proc_root)
    if glob.glob(mig_caps):
        seen.append(f"a MIG slice, whose parent card's UUID is all {proc_root} gives")
    elif len(proc) == 1 and is_gpu_uuid(proc[0]):
        return proc[0]
    elif proc:
        seen.append(f"{proc_root} lists {len(proc)} GPUs")
    raise NoGpu(
        "no single GPU UUID (GPU-… or MIG-…) found: "
        + "; ".join(seen)
        + ". Install nvidia-ml-py in the image, or check that the device plugin gave this "
        "pod one GPU (with CDI, NVIDIA_VISIBLE_DEVICES is not set)"
    )


def delivery(environ: Mapping[str, str]) -> str:
    """How the device plugin handed this container its GPU, from NVIDIA_VISIBLE_DEVICES:
    unset or `void` (what the NVIDIA CDI spec sets): `cdi` (cdi-annotations or cdi-cri);
    a path: `volume-mounts`; else `envvar`."""
    visible = environ.get("NVIDIA_VISIBLE_DEVICES", "").strip()
    if visible in ("", "void"):
        return "cdi"
    return "volume-mounts" if visible.startswith("/") else "envvar"


def _endpoint(env: Mapping[str, str]) -> tuple[str, dict[str, str], ssl.SSLContext | None]:
    """(base URL, headers, TLS context): SHOAL_KUBE_HOST if set (tests), else in-cluster."""
    headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
    host = env.get("SHOAL_KUBE_HOST")
    if host:
        return host.rstrip("/"), headers, None
    server = env.get("KUBERNETES_SERVICE_HOST")
    port = env.get("KUBERNETES_SERVICE_PORT", "443")
    if not server:
        raise NoGpu("not in a cluster: KUBERNETES_SERVICE_HOST and SHOAL_KUBE_HOST unset")
    with open(os.path.join(SA_DIR, "token")) as f:
        headers["Authorization"] = f"Bearer {f.read().strip()}"
    ctx = ssl.create_default_context(cafile=os.path.join(SA_DIR, "ca.crt"))
    if ":" in server:  # IPv6
        server = f"[{server}]"
    return f"https://{server}:{port}", headers, ctx


def announce(
    env: Mapping[str, str], namespace: str, pod: str, uuid: str, deadline_s: float = 120.0
) -> None:
    """Merge-patch the UUID (and `delivery`) annotations onto our pod; transient failures
    are retried with backoff until `deadline_s`, then raised (so the container restarts)."""
    base, headers, ctx = _endpoint(env)
    url = f"{base}/api/v1/namespaces/{namespace}/pods/{pod}"
    ann = {GPU_UUID_ANNOTATION: uuid, DELIVERY_ANNOTATION: delivery(env)}
    body = json.dumps({"metadata": {"annotations": ann}}).encode()
    end, delay = time.monotonic() + deadline_s, 0.5
    while True:
        req = urllib.request.Request(url, data=body, headers=headers, method="PATCH")
        try:
            with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
                resp.read()
            log.info("pod %s/%s holds GPU %s", namespace, pod, uuid)
            return
        except urllib.error.HTTPError as e:
            if e.code not in (429, 500, 502, 503, 504) or time.monotonic() > end:
                raise
            why = f"HTTP {e.code}"
        except (urllib.error.URLError, OSError) as e:
            if time.monotonic() > end:
                raise
            why = str(e)
        log.warning("publishing the UUID failed (%s); retrying in %.1fs", why, delay)
        time.sleep(delay)
        delay = min(delay * 2, 10.0)


def main(environ: Mapping[str, str] | None = None, wait: bool = True) -> int:
    """Read the UUID, announce it, then hold the GPU until SIGTERM. Returns an exit code."""
    env = dict(os.environ if environ is None else environ)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    pod, namespace = env.get("POD_NAME"), env.get("POD_NAMESPACE")
    if not pod or not namespace:
        log.error("POD_NAME and POD_NAMESPACE must be set (downward API)")
        return 2
    stop = {"now": False}
    if wait:  # before anything else: a SIGTERM right after the announce is a clean stop

        def on_term(*_: object) -> None:
            stop["now"] = True

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
    try:
        uuid = read_gpu_uuid(env)
    except NoGpu as e:
        log.error("%s", e)
        path = env.get("SHOAL_TERMINATION_LOG", TERMINATION_LOG)
        with contextlib.suppress(OSError), open(path, "w") as f:  # no such file outside a pod
            f.write(str(e)[:4000])  # the kubelet keeps at most 4096 bytes
        return NO_GPU_EXIT
    try:
        announce(env, namespace, pod, uuid)
    except (NoGpu, OSError, urllib.error.URLError) as e:
        log.error("%s", e)
        return 1
    while wait and not stop["now"]:  # a signal ends the sleep early; no pause() race
        time.sleep(1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
