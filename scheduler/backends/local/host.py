"""The local backend `shoal serve` runs: the simulated cluster of a YAML file, or this
host's real GPUs (`--gpus auto`, or a cluster file whose one node says `gpus: auto`).

Real GPUs come from NVML (`gpus.discover`); each worker then sees only the GPUs it was
given (the backend sets CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES to their UUIDs),
and an MPS control daemon is started where one can run, so fractions are enforced
(`mps`); elsewhere they stay `advisory`. On a host with no GPU, `--gpus auto` stops with
"no GPU found: <why>", unless `fallback_simulated` (`--fallback-simulated`) asks for the
simulated cluster instead. Called by `scheduler.cli.wiring.make_backend`.

A cluster file for a real host (every key but `gpus` optional; CPU and memory default to
the host's):

    nodes:
      - name: lab-box
        gpus: auto
        cpu: 60           # what Shoal may hand out, leaving some for the system
        memory: 480Gi
        labels: {lab: vision}                  # optional, as for a simulated node
        taints: [{key: reserved, effect: PreferNoSchedule}]
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from scheduler.backends.local import cluster, gpus, mps, nvml
from scheduler.backends.local.backend import LocalBackend
from scheduler.backends.local.users import WorkerUsers
from scheduler.spec.quantities import parse_cpu_milli, parse_memory_mib

log = logging.getLogger("shoal.local")


class NoGpuHost(RuntimeError):
    """`--gpus auto` on a host without a usable GPU, and no fallback asked for."""


def auto_entry(cluster_file: str | Path | None) -> dict[str, Any] | None:
    """The cluster file's `gpus: auto` node, or None when it has none (or no file)."""
    if cluster_file is None:
        return None
    data = yaml.safe_load(Path(cluster_file).read_text())
    nodes = data.get("nodes") if isinstance(data, dict) else None
    auto = [n for n in nodes or [] if isinstance(n, dict) and n.get("gpus") == "auto"]
    if not auto:
        return None
    if len(nodes or []) != 1:
        raise ValueError(
            f"{cluster_file}: a node with `gpus: auto` is this host; it must be the only node"
        )
    return dict(auto[0])


def host_memory_mib(meminfo: str = "/proc/meminfo") -> int:
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def discover(entry: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> gpus.Host:
    """This host's GPUs as nodes; `entry` (a cluster file's node) may name it and set its
    CPU and memory. Raises NoGpu (NVML missing or no GPU)."""
    try:
        bindings = nvml.load(environ)
    except nvml.Unavailable as e:
        raise gpus.NoGpu(f"no GPU found: {e}") from None
    cpu = entry.get("cpu")
    mem = entry.get("memory")
    name = str(entry.get("name") or socket.gethostname())
    try:
        labels = cluster.parse_labels(entry.get("labels"))
        taints = cluster.parse_taints(entry.get("taints"))
    except ValueError as exc:
        raise ValueError(f"{name} (gpus: auto): {exc}") from None
    found = gpus.discover(
        bindings,
        host=name,
        cpu_milli=parse_cpu_milli(cpu) if cpu is not None else (os.cpu_count() or 1) * 1000,
        memory_mib=parse_memory_mib(str(mem)) if mem is not None else host_memory_mib(),
    )
    nodes = tuple(
        dataclasses.replace(n, labels={cluster.HOSTNAME: n.name, **labels}, taints=taints)
        for n in found.nodes
    )
    return dataclasses.replace(found, nodes=nodes)


def local_backend(
    state: Path,
    *,
    cluster_file: str | None,
    gpus_auto: bool,
    fallback_simulated: bool = False,
    use_mps: bool = True,
    on_change: Callable[[], None] | None = None,
    users: WorkerUsers | None = None,
) -> LocalBackend:
    """The backend for `shoal serve --backend local` (see the module doc); its workers
    run as `users` says."""
    entry = auto_entry(cluster_file)
    if not gpus_auto and entry is None:
        return LocalBackend(state, cluster_file=cluster_file, on_change=on_change, users=users)
    try:
        host = discover(entry or {})
    except gpus.NoGpu as e:
        if not fallback_simulated:
            raise NoGpuHost(
                f"{e}. Without GPUs, run without --gpus auto (the simulated cluster), or add "
                "--fallback-simulated to fall back to it"
            ) from None
        log.warning("%s; running the simulated cluster instead (--fallback-simulated)", e)
        simulated = None if entry is not None else cluster_file
        return LocalBackend(state, cluster_file=simulated, on_change=on_change, users=users)
    backend = LocalBackend(state, host=host, on_change=on_change, users=users)
    for gpu, why in host.excluded.items():
        log.warning("not offered: %s: %s", gpu, why)
    if use_mps:
        try:
            backend.use_mps(mps.start(state, backend.instance))
        except mps.Unavailable as e:
            backend.mps_unavailable = str(e)
            log.warning("no MPS (%s): GPU fractions are advisory (the launcher's cap)", e)
    for node in backend.nodes():
        log.info(
            "GPU node %s: %d x %s (%d MiB), fractions %s",
            node.name,
            node.gpu_count,
            node.gpu_model,
            node.gpu_memory_mib,
            backend.enforcement(node.name),
        )
    return backend
