"""Fluent-ish builders for placement tests: nodes, jobs and states in one line."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler import model as m
from scheduler import placement


def node(
    name: str,
    gpus: int = 4,
    model: str = "A100",
    cpu: int = 64_000,
    mem: int = 262_144,
    gpu_mem: int = 40_960,
) -> m.Node:
    return m.Node(name, cpu, mem, gpus, model, gpu_mem)


def job(
    id: str = "j",
    gpu: float = 0.0,
    workers: int = 1,
    cpu: int = 1000,
    mem: int = 1024,
    types: Sequence[str] = (),
    gpu_mem: int | None = None,
) -> m.JobRequest:
    return m.JobRequest(
        id, "q", workers=workers, gpu=gpu, gpu_memory_mib=gpu_mem, cpu_milli=cpu,
        memory_mib=mem, gpu_types=tuple(types),
    )  # fmt: skip


def running(j: m.JobRequest, *where: tuple[str, tuple[int, ...], float]) -> m.RunningJob:
    """A running job with one placement per `(node, gpus, fraction)`."""
    return m.RunningJob(
        j, tuple(m.WorkerPlacement(k, n, g, f) for k, (n, g, f) in enumerate(where))
    )


def state(nodes: Sequence[m.Node], runs: Sequence[m.RunningJob] = ()) -> placement.ClusterState:
    return placement.ClusterState.build(nodes, tuple(runs))


def snapshot(s: placement.ClusterState) -> tuple[object, ...]:
    """Everything observable about a state, to compare before and after."""
    return (
        tuple(
            (n.name, s.free_cpu(n.name), s.free_memory(n.name), s.gpu_free(n.name)) for n in s.nodes
        ),
        tuple(sorted(s.jobs)),
        tuple(sorted((sig, tuple(ms)) for sig, ms in s.classes.items())),
        tuple(sorted(s.open)),
        tuple(tuple(sorted(t.items())) for t in s.tags),
    )
