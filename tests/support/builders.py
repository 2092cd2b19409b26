"""The one set of test builders, for the core and the placement tests alike.

Small fluent builders for core scenarios (in the style of Kueue's
`MakeClusterQueue("cq").ResourceGroup(...).Obj()`): `queue`, `job`, `node`/`nodes`,
`on` (a running job), `snapshot`, and `advance` to carry a cycle's decisions into the
next snapshot. Flat one-line builders for placement: `a100` (a node), `request` (a job
request), `running`, `state`, and `observe` (everything observable about a state).

Two node presets, each named for what it is: `node` is an 8-GPU H100-80GB node (64
cores, 500 GiB), `a100` a 4-GPU A100-40GB node (64 cores, 256 GiB).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

from scheduler import model as m
from scheduler import placement
from scheduler.backends.base import LaunchRequest
from scheduler.model import WorkerPlacement
from scheduler.spec import JobSpec, Origin


def node(
    name: str,
    gpus: int = 8,
    model: str = "H100",
    *,
    cpu: int = 64_000,
    mem: int = 512_000,
    gpu_mem: int = 81_920,
) -> m.Node:
    return m.Node(name, cpu, mem, gpus, model, gpu_mem)


def nodes(count: int, gpus: int = 8, model: str = "H100", prefix: str = "n") -> list[m.Node]:
    return [node(f"{prefix}{i}", gpus, model) for i in range(count)]


class QueueB:
    def __init__(self, name: str) -> None:
        self._q = m.Queue(name)

    def guarantee(self, total: float, **by_model: float) -> QueueB:
        self._q = dataclasses.replace(self._q, guaranteed=m.Quota(total, by_model))
        return self

    def limit(self, total: float | None, **by_model: float) -> QueueB:
        self._q = dataclasses.replace(self._q, limit=m.Quota(total, by_model))
        return self

    def weight(self, w: float) -> QueueB:
        self._q = dataclasses.replace(self._q, weight=w)
        return self

    def parent(self, p: str) -> QueueB:
        self._q = dataclasses.replace(self._q, parent=p)
        return self

    def obj(self) -> m.Queue:
        return self._q


class JobB:
    def __init__(self, job_id: str, queue: str) -> None:
        self._j = m.JobRequest(job_id, queue, gpu=1.0, cpu_milli=1000, memory_mib=1024)

    def gpu(self, g: float) -> JobB:
        return self._set(gpu=g)

    def gpu_memory(self, mib: int) -> JobB:
        return self._set(gpu=0.0, gpu_memory_mib=mib)

    def workers(self, n: int) -> JobB:
        return self._set(workers=n)

    def types(self, *t: str) -> JobB:
        return self._set(gpu_types=t)

    def priority(self, p: int) -> JobB:
        return self._set(priority=p)

    def preemptible(self, p: bool | None) -> JobB:
        return self._set(preemptible=p)

    def submitted(self, t: float) -> JobB:
        return self._set(submitted_at=t)

    def runtime(self, s: float) -> JobB:
        return self._set(max_runtime_s=s)

    def cpu(self, milli: int) -> JobB:
        return self._set(cpu_milli=milli)

    def elastic(self, most: int) -> JobB:
        """Elastic: `workers` is its gang, `most` its max."""
        return self._set(max_workers=most)

    def distinct(self, on: bool = True) -> JobB:
        return self._set(distinct_gpus=on)

    def enforced(self) -> JobB:
        return self._set(enforced_only=True)

    def _set(self, **kw: object) -> JobB:
        self._j = dataclasses.replace(self._j, **kw)  # type: ignore[arg-type]
        return self

    def obj(self) -> m.JobRequest:
        return self._j


def queue(name: str) -> QueueB:
    return QueueB(name)


def job(job_id: str, queue: str) -> JobB:
    return JobB(job_id, queue)


def on(
    job: m.JobRequest,
    node_name: str,
    first_gpu: int = 0,
    started: float = 0.0,
    stopping: bool = False,
) -> m.RunningJob:
    """A running job with all its workers on one node, on consecutive whole GPUs
    (or sharing GPU `first_gpu` when fractional)."""
    placements = []
    g = first_gpu
    for w in range(job.workers):
        if job.gpu >= 1:
            count = int(job.gpu)
            placements.append(m.WorkerPlacement(w, node_name, tuple(range(g, g + count)), 1.0))
            g += count
        elif job.gpu > 0:
            placements.append(m.WorkerPlacement(w, node_name, (first_gpu,), job.gpu))
        else:
            placements.append(m.WorkerPlacement(w, node_name, (), 1.0))
    return m.RunningJob(job, tuple(placements), started, stopping)


def assert_waits(result: m.CycleResult, job_id: str, code: m.ReasonCode, says: str) -> None:
    """`job_id` was kept pending with `code`, its message containing `says`."""
    reason = {k.job_id: k.reason for k in result.pending}[job_id]
    assert reason.code is code and says in reason.message, reason


def advance(snap: m.Snapshot, result: m.CycleResult, now: float) -> m.Snapshot:
    """The next snapshot once the cycle's decisions are carried out: placed jobs run
    (started at `now`), preempted jobs are gone and back to pending, resized jobs run
    at their new size (resized at `now`; a shrink's workers gone)."""
    pending = {j.id: j for j in snap.pending}
    running = {r.job.id: r for r in snap.running}
    for place in result.places:
        job = pending.pop(place.job_id)
        running[job.id] = m.RunningJob(job, place.placements, now)
    for pre in result.preempts:
        victim = running.pop(pre.job_id)
        pending[victim.job.id] = victim.job
    for r in result.resizes:
        running[r.job_id] = dataclasses.replace(
            running[r.job_id], placements=r.placements, resized_at=now
        )
    return dataclasses.replace(
        snap,
        running=tuple(running[k] for k in sorted(running)),
        pending=tuple(pending[k] for k in sorted(pending)),
        now=now,
    )


def snapshot(
    nodes_: Iterable[m.Node],
    queues: Iterable[m.Queue],
    running: Iterable[m.RunningJob] = (),
    pending: Iterable[m.JobRequest] = (),
    now: float = 1000.0,
    config: m.Config | None = None,
) -> m.Snapshot:
    return m.Snapshot(
        tuple(nodes_), tuple(queues), tuple(running), tuple(pending), now, config or m.Config()
    )


# -- placement ---------------------------------------------------------------------


def a100(
    name: str,
    gpus: int = 4,
    model: str = "A100",
    cpu: int = 64_000,
    mem: int = 262_144,
    gpu_mem: int = 40_960,
) -> m.Node:
    return m.Node(name, cpu, mem, gpus, model, gpu_mem)


def request(
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


def observe(s: placement.ClusterState) -> tuple[object, ...]:
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


def launch_request(
    name: str,
    *,
    workers: int = 1,
    framework: str = "pytorch",
    gpu: float | None = 1,
    node_of: Callable[[int], str] = lambda i: "n1",
    gpus_of: Callable[[int], tuple[int, ...]] | None = None,
    attempt: int = 0,
    extra_env: dict[str, str] | None = None,
    queue: str = "vision",
    owner: Origin | None = None,
) -> LaunchRequest:
    """One attempt of a job `name` (also its id) as the loop hands it to a backend:
    worker i on `node_of(i)`, whole GPUs counted from 0 unless `gpus_of` says."""
    spec = JobSpec(
        name=name,
        queue=queue,
        framework=framework,
        image="ghcr.io/x/train:1",
        command=["python", "train.py"],
        workers=workers,
        gpu=gpu,
        cpu="2",
        memory="8Gi",
        env={"USER_VAR": "1"},
    )
    frac = gpu if gpu is not None and gpu < 1 else 1.0
    whole = int(gpu) if gpu and gpu >= 1 else (1 if gpu else 0)
    placements = tuple(
        WorkerPlacement(
            worker=i,
            node=node_of(i),
            gpus=gpus_of(i) if gpus_of else tuple(range(i * whole, (i + 1) * whole)),
            fraction=frac,
        )
        for i in range(workers)
    )
    return LaunchRequest(
        job_id=name,
        spec=spec,
        attempt=attempt,
        placements=placements,
        extra_env=extra_env or {},
        owner=owner,
    )
