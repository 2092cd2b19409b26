"""Loading NVML, the driver's management library, for `shoal serve --gpus auto`.

`load()` imports `pynvml` (the nvidia-ml-py package, the `gpu` extra), or the module named
by SHOAL_NVML_MODULE: the tests name a fake (`tests/support/fake_nvml.py`) that implements
exactly the calls Shoal makes, so discovery is tested where no GPU is. Called by
`host.local_backend`; the calls themselves are made by `gpus.discover`.

The calls used (a fake must provide these):
  nvmlInit, nvmlShutdown, nvmlSystemGetDriverVersion, nvmlDeviceGetCount,
  nvmlDeviceGetHandleByIndex, nvmlDeviceGetName, nvmlDeviceGetUUID,
  nvmlDeviceGetMemoryInfo (`.total`, bytes), nvmlDeviceGetMigMode ((current, pending)),
  nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex, and the exception
  class NVMLError.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

MODULE_ENV = "SHOAL_NVML_MODULE"
DEFAULT_MODULE = "pynvml"


class Unavailable(RuntimeError):
    """NVML cannot be used on this host; the message says why."""


def load(environ: Mapping[str, str] | None = None) -> Any:
    """The NVML bindings module, or Unavailable."""
    env = os.environ if environ is None else environ
    name = env.get(MODULE_ENV) or DEFAULT_MODULE
    try:
        return importlib.import_module(name)
    except ImportError as e:
        hint = " (pip install 'shoal[gpu]', which brings nvidia-ml-py)" if name == "pynvml" else ""
        raise Unavailable(f"the NVML bindings {name!r} are not installed{hint}: {e}") from None


def text(value: Any) -> str:
    """NVML strings are bytes in older bindings, str in newer ones."""
    return value.decode() if isinstance(value, bytes) else str(value)
