"""A fake `pynvml` implementing exactly the calls Shoal makes (scheduler/backends/local/nvml.py
lists them), so GPU discovery and `shoal serve --gpus auto` are tested where no GPU is.

Selected with SHOAL_NVML_MODULE=support.fake_nvml (tests/ on PYTHONPATH). Its GPUs come
from `configure(...)` in-process, or from the JSON file named by SHOAL_FAKE_NVML in a
subprocess:

    {"driver": "580.1",
     "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-...", "memoryMiB": 143771},
              {"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-...", "memoryMiB": 40960,
               "mig": [{"name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "uuid": "MIG-...",
                        "memoryMiB": 4864}]}],
     "initError": null}

`"mig": []` is a GPU in MIG mode with no MIG device; no "mig" key, MIG off. `initError`
makes nvmlInit fail as a host without a driver does.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

ENV = "SHOAL_FAKE_NVML"
_config: dict[str, Any] | None = None


class NVMLError(Exception):
    pass


@dataclass(frozen=True)
class _Memory:
    total: int
    used: int = 0
    free: int = 0


@dataclass(frozen=True)
class _Handle:
    info: dict[str, Any]


def configure(config: dict[str, Any] | None) -> None:
    """Use `config` (the JSON form above) instead of SHOAL_FAKE_NVML; None: read it again."""
    global _config
    _config = config


def _state() -> dict[str, Any]:
    if _config is not None:
        return _config
    path = os.environ.get(ENV)
    if not path:
        return {"gpus": []}
    with open(path) as f:
        loaded: dict[str, Any] = json.load(f)
    return loaded


def nvmlInit() -> None:
    error = _state().get("initError")
    if error:
        raise NVMLError(error)


def nvmlShutdown() -> None:
    pass


def nvmlSystemGetDriverVersion() -> str:
    return str(_state().get("driver", "0.0"))


def nvmlDeviceGetCount() -> int:
    return len(_state()["gpus"])


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    gpus = _state()["gpus"]
    if not 0 <= index < len(gpus):
        raise NVMLError("Invalid Argument")
    return _Handle(gpus[index])


def nvmlDeviceGetName(handle: _Handle) -> bytes:
    return str(handle.info["name"]).encode()  # bytes, as older bindings return


def nvmlDeviceGetUUID(handle: _Handle) -> str:
    return str(handle.info["uuid"])


def nvmlDeviceGetMemoryInfo(handle: _Handle) -> _Memory:
    total = int(handle.info["memoryMiB"]) * 1024 * 1024
    return _Memory(total=total, free=total)


def nvmlDeviceGetMigMode(handle: _Handle) -> tuple[int, int]:
    if "mig" not in handle.info:
        raise NVMLError("Not Supported")
    return (1, 1)


def nvmlDeviceGetMaxMigDeviceCount(handle: _Handle) -> int:
    return 7 if "mig" in handle.info else 0


def nvmlDeviceGetMigDeviceHandleByIndex(handle: _Handle, index: int) -> _Handle:
    migs = handle.info.get("mig") or []
    if not 0 <= index < len(migs):
        raise NVMLError("Not Found")
    return _Handle(migs[index])
