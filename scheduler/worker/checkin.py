"""A share's check-in: before a fractional worker's command runs on a Kubernetes
device-plugin node, check that the GPU its reservation holds is visible in the
container, and fail fast with the reason if not.

Such a worker (a *share*) requests no `nvidia.com/gpu`; it reaches its reservation's GPU
only because the NVIDIA Container Runtime reads `NVIDIA_VISIBLE_DEVICES` (the UUID the
reservation reported) in a container that asked for no GPU. A runtime that does not
(another runtime, or the NVIDIA toolkit with
`accept-nvidia-visible-devices-envvar-when-unprivileged = false`) starts the container
with no GPU at all, and the training would silently run on the CPU or crash in CUDA init.

Who runs it: the Kubernetes backend gives every share pod an init container running
`python -m scheduler.worker.checkin` in Shoal's own image (so whatever the job's command
is, it is checked before it starts), and marks the worker container `SHOAL_SHARE_CHECKED`;
the worker launcher checks only where no init container did (a pod made before the init
container existed). `checks` is the one decision for both.

When it checks: only where the Kubernetes backend says the worker is a share of a GPU
reservation (`SHOAL_GPU_RESERVATION`, set on those pods alone), with
`SHOAL_GPU_FRACTION` set and `NVIDIA_VISIBLE_DEVICES` naming one GPU (`GPU-…`,
`MIG-…`, or a CDI name `kind=<uuid>`), and the job did not set
`SHOAL_SHARE_CHECK=off`. Whole GPUs, MPS replicas and DRA claims (the device plugin or
driver hands the GPU over), CPU workers and the local backend are never checked.

What it checks, cheaply (no CUDA, no torch): a GPU device node `/dev/nvidia<N>` exists
(the runtime creates it for the visible GPU); and, if the image has nvidia-ml-py and
NVML starts, that NVML lists the UUID. Where NVML cannot answer (not installed, no
driver library, a MIG UUID with no MIG listing) the device node alone decides: the check
fails only on what it saw, never on what it could not read.

A failure exits `NO_GPU_EXIT` and writes a message starting with `PREFIX` to the
termination log; the backend (`status.share_check_failure`) reads that pair from the
pod's status as the reservation's exit 3 is read: the worker failed by the
infrastructure (retried without using up backoffLimit) and no sharing on that node for
`sharing_retry_s`. Standard library only, plus pynvml when present.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

# EX_TEMPFAIL (sysexits.h): the infrastructure's, worth retrying elsewhere. A user's
# command may exit 75 too, so the backend also requires the message to start with PREFIX.
NO_GPU_EXIT = 75
PREFIX = "share sees no GPU"
RESERVATION_ENV = "SHOAL_GPU_RESERVATION"  # the reservation pod's name; set on shares only
OPT_OUT_ENV = "SHOAL_SHARE_CHECK"  # "off" in a job's env skips the check
# Set on a share's worker container whose init container checks: the launcher then
# does not check a second time.
CHECKED_ENV = "SHOAL_SHARE_CHECKED"
DEV = "/dev"
TERMINATION_LOG = "/dev/termination-log"  # the kubelet's default terminationMessagePath
UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z][0-9A-Za-z/-]*$")  # = reserve.UUID_RE

Nvml = Callable[[], list[str] | None]


def checks(env: Mapping[str, str]) -> bool:
    """Whether a worker with this environment checks in: a reservation's share whose job
    did not opt out and that no init container checked already. The manifest asks it of
    the worker's environment to add the init container; the check asks it of its own."""
    if not env.get(RESERVATION_ENV) or not env.get("SHOAL_GPU_FRACTION"):
        return False
    if env.get(OPT_OUT_ENV, "").strip().lower() in ("off", "false", "0", "no"):
        return False
    return not env.get(CHECKED_ENV)


def wanted_uuid(env: Mapping[str, str]) -> str | None:
    """The UUID this worker must see, or None where it is not checked (module doc)."""
    if not checks(env):
        return None
    visible = env.get("NVIDIA_VISIBLE_DEVICES", "").strip()
    uuid = visible.rpartition("=")[2]  # `vendor/class=<uuid>` with reservations.shareCdiKind
    return uuid if "," not in visible and UUID_RE.match(uuid) else None


def device_nodes(dev: str = DEV) -> list[str]:
    """The GPU device nodes in `dev` (`nvidia0`…; not nvidiactl, nvidia-uvm, nvidia-caps)."""
    return sorted(
        p for p in glob.glob(os.path.join(dev, "nvidia*")) if os.path.basename(p)[6:].isdigit()
    )


def nvml_uuids() -> list[str] | None:
    """Every GPU's and MIG device's UUID NVML lists here, or None where NVML cannot
    answer (no pynvml, no driver library)."""
    try:
        nvml: Any = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:  # ImportError, NVMLError: not knowing is no failure
        return None
    found: list[str] = []
    try:
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            found.append(_text(nvml.nvmlDeviceGetUUID(handle)))
            with contextlib.suppress(Exception):  # no MIG on this GPU or in this binding
                for j in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
                    with contextlib.suppress(Exception):  # a slot not visible here
                        mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)
                        found.append(_text(nvml.nvmlDeviceGetUUID(mig)))
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def problem(env: Mapping[str, str], *, dev: str = DEV, nvml: Nvml = nvml_uuids) -> str | None:
    """Why this share cannot use its GPU (a message starting with PREFIX), or None when
    it sees it or is not checked."""
    uuid = wanted_uuid(env)
    if uuid is None:
        return None
    named = f"NVIDIA_VISIBLE_DEVICES={env['NVIDIA_VISIBLE_DEVICES'].strip()}"
    of = f" (GPU reservation {env[RESERVATION_ENV]})"
    if not device_nodes(dev):
        return (
            f"{PREFIX}: {named}{of} but no {os.path.join(dev, 'nvidia<N>')} device; the "
            "container runtime does not hand a GPU to a container that requests none: the "
            "NVIDIA Container Runtime is not this pod's runtime (set workerRuntimeClassName) "
            "or it has accept-nvidia-visible-devices-envvar-when-unprivileged = false"
        )
    seen = nvml()
    if seen is None or (uuid.startswith("MIG-") and not any(u.startswith("MIG-") for u in seen)):
        return None  # NVML cannot tell; the device node is there
    if uuid not in seen:
        return (
            f"{PREFIX}: {named}{of} but NVML lists "
            + (", ".join(seen) if seen else "no GPU")
            + " here: the container runtime did not hand this container its reservation's GPU"
        )
    return None


def check(
    env: Mapping[str, str] | None = None, *, dev: str = DEV, nvml: Nvml = nvml_uuids
) -> int | None:
    """The check-in: None to go on, else the exit code, after saying why on stderr and
    in the termination log (`SHOAL_TERMINATION_LOG` overrides its path)."""
    env = os.environ if env is None else env
    why = problem(env, dev=dev, nvml=nvml)
    if why is None:
        return None
    print(f"shoal worker: {why}", file=sys.stderr, flush=True)
    path = env.get("SHOAL_TERMINATION_LOG", TERMINATION_LOG)
    with contextlib.suppress(OSError), open(path, "w") as f:  # no such file outside a pod
        f.write(why[:4000])  # the kubelet keeps at most 4096 bytes
    return NO_GPU_EXIT


def main() -> int:
    """`python -m scheduler.worker.checkin`: a share pod's init container (0: go on)."""
    if (refused := check()) is not None:
        return refused
    if uuid := wanted_uuid(os.environ):
        print(f"shoal share check: passed for {uuid}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
