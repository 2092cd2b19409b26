"""A local worker's environment: the pod's (`workerenv.worker_env`, every host 127.0.0.1), the
loop's extras (SHOAL_API_URL, the job's worker token), the run directory's files, and on a
real GPU host its devices. `processes.spawn` adds the few host variables a process needs.

On a real GPU host (`gpus.Host`) a worker sees only its GPUs: CUDA_VISIBLE_DEVICES and
NVIDIA_VISIBLE_DEVICES name their UUIDs (empty for a CPU-only worker, so it sees none).
With an MPS daemon each fractional worker also gets its MPS limits (`mps.worker_env`).
These are set after the job's own `env`, so a job cannot widen them. No value here names
a path of the state directory (tests/backends checks it).
"""

from __future__ import annotations

from pathlib import Path

from scheduler.backends import base, workerenv
from scheduler.backends.local import gpus, mps, records, volumes
from scheduler.model import Enforcement, Node, WorkerPlacement
from scheduler.spec import Framework


def worker_environment(
    request: base.LaunchRequest,
    p: WorkerPlacement,
    rec: records.AttemptRecord,
    *,
    host: gpus.Host | None,
    node: Node | None,
    daemon: mps.Daemon | None,
    hostfile: Path,
    stop_file: str = "",
) -> dict[str, str]:
    """The environment of worker `p` of the attempt `rec`; `stop_file`: the worker's own
    (an elastic attempt's), else the attempt's."""
    hosts = ["127.0.0.1"] * len(request.placements)
    visible = host.visible(p.node, p.gpus) if host is not None else None
    env = workerenv.worker_env(
        request.spec,
        p,
        hosts,
        job_id=request.job_id,
        attempt=request.attempt,
        gpu_ids=visible if visible is not None else [f"local-{p.node}-gpu{g}" for g in p.gpus],
        enforcement=node.enforcement if node is not None else Enforcement.ADVISORY,
        port=rec.port,
    )
    env.update(request.extra_env)
    env.update(volumes.volume_env(request.spec))
    if visible is not None:
        env.update(device_env(p, visible, daemon, node.gpu_memory_mib if node else 0))
    env["SHOAL_PREEMPT_FILE"] = rec.preempt_file
    env["SHOAL_STOP_FILE"] = stop_file or rec.stop_file
    if request.spec.framework is Framework.MPI:
        env["OMPI_MCA_orte_default_hostfile"] = str(hostfile)
    return env


def device_env(
    p: WorkerPlacement, visible: list[str], daemon: mps.Daemon | None, gpu_memory_mib: int
) -> dict[str, str]:
    """A real host's device variables: only its GPUs (none for a CPU-only worker), and,
    for a fraction on an MPS node, the limits MPS holds it to."""
    env = {"CUDA_VISIBLE_DEVICES": ",".join(visible)}
    if not visible:
        env["NVIDIA_VISIBLE_DEVICES"] = "void"
    if daemon is not None and visible and p.fraction < 1:
        env.update(mps.worker_env(daemon, p.fraction, gpu_memory_mib))
    return env
