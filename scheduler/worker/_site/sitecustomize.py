"""Put on PYTHONPATH by the worker launcher when SHOAL_GPU_FRACTION is set: caps PyTorch's
CUDA caching allocator to that fraction of the GPU as soon as the user imports torch.

Cooperative (advisory) only: a process can raise its own cap again. No CUDA: no-op.
"""

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any


def _cap(module: Any) -> None:
    try:
        frac = float(os.environ["SHOAL_GPU_FRACTION"])
        if module.cuda.is_available():
            for dev in range(module.cuda.device_count()):
                module.cuda.set_per_process_memory_fraction(frac, dev)
    except Exception as exc:
        print(f"shoal: could not cap GPU memory: {exc}", file=sys.stderr)


class _TorchHook(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _cap(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("SHOAL_GPU_FRACTION"):
    sys.meta_path.insert(0, _TorchHook())
