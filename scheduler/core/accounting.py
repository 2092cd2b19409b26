"""GPU accounting over a snapshot: the queue tree, capacity, usage and demand.

Called by `fairshare`, `invariants`, `cycle` and `explain`. Everything that sums GPUs
per queue and per GPU model lives here so that the rules agree on the numbers. `Ledger`
is the one mutable piece: the cycle adds each admission (and removes each victim) so
that later quota checks see the cycle's own decisions, in O(depth of the tree).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler import model as m
from scheduler.placement import fit

Amounts = dict[str, float]  # m.TOTAL and GPU models -> GPUs


@dataclass(frozen=True, slots=True)
class QueueTree:
    """Queues by name with their parent chains (self first, root last)."""

    queues: Mapping[str, m.Queue]
    chains: Mapping[str, tuple[str, ...]]
    children: Mapping[str | None, tuple[str, ...]]

    @staticmethod
    def build(queues: Iterable[m.Queue]) -> QueueTree:
        by_name = {q.name: q for q in queues}
        children: dict[str | None, list[str]] = defaultdict(list)
        chains: dict[str, tuple[str, ...]] = {}
        for name in sorted(by_name):
            chain = [name]
            parent = by_name[name].parent
            # An unknown parent or a cycle ends the chain: the queue acts as a root.
            while parent is not None and parent in by_name and parent not in chain:
                chain.append(parent)
                parent = by_name[parent].parent
            chains[name] = tuple(chain)
            children[chain[1] if len(chain) > 1 else None].append(name)
        return QueueTree(by_name, chains, {k: tuple(v) for k, v in children.items()})

    def rollup(self, own: Mapping[str, float]) -> dict[str, float]:
        """Each queue's own amount plus every descendant's: a parent holds its whole
        subtree, as fair share counts it (the one roll-up: the core's ledger, the API's
        views and a Queue CR's status all add along these chains). A queue not in the
        tree (deleted since) counts for itself; every queue of the tree is in the result."""
        out = dict.fromkeys(self.queues, 0.0)
        for queue, amount in own.items():
            for name in self.chains.get(queue, (queue,)):
                out[name] = out.get(name, 0.0) + amount
        return out

    def subtree(self, name: str) -> set[str]:
        """`name` and every queue below it."""
        return {q for q, chain in self.chains.items() if name in chain} | {name}


def guaranteed(queue: m.Queue, key: str) -> float:
    """The guarantee for one key (m.TOTAL or a model); absent means 0."""
    value = queue.guaranteed.of(key)
    return value or 0.0


def limit(queue: m.Queue, key: str) -> float | None:
    """The limit for one key; None means unlimited."""
    return queue.limit.of(key)


def capacity(nodes: Iterable[m.Node]) -> Amounts:
    """GPUs of the cluster in total and per model."""
    cap: Amounts = defaultdict(float)
    for node in nodes:
        if node.gpu_count > 0:
            cap[m.TOTAL] += node.gpu_count
            cap[node.gpu_model] += node.gpu_count
    cap.setdefault(m.TOTAL, 0.0)
    return dict(cap)


def placed_gpus(placements: Iterable[m.WorkerPlacement]) -> float:
    """GPUs a set of worker placements holds (fraction times GPUs listed)."""
    return sum(p.gpus_held for p in placements)


def running_usage(job: m.RunningJob, nodes: Mapping[str, m.Node]) -> Amounts:
    """GPUs a running job holds, in total and per model (unknown nodes: model '')."""
    use: Amounts = defaultdict(float)
    for p in job.placements:
        node = nodes.get(p.node)
        use[m.TOTAL] += p.gpus_held
        use[node.gpu_model if node is not None else ""] += p.gpus_held
    return dict(use)


class PendingGpus:
    """GPUs a pending job will take, per allowed model, before it is placed.

    `gpu` is exact. `gpu_memory_mib` becomes the share placement would give on the
    model's largest GPU memory (`fit.gpu_share`); a model whose GPUs never hold it
    counts one whole GPU, as `fit.worker_gpu_share` does."""

    def __init__(self, nodes: Iterable[m.Node]) -> None:
        mem: dict[str, int] = {}
        for node in nodes:
            if node.gpu_count > 0:
                mem[node.gpu_model] = max(mem.get(node.gpu_model, 0), node.gpu_memory_mib)
        self.models: tuple[str, ...] = tuple(sorted(mem))
        self._memory = mem
        self._cache: dict[tuple[float, int | None, tuple[str, ...]], Amounts] = {}

    def allowed_models(self, job: m.JobRequest) -> tuple[str, ...]:
        if not job.gpu_types:
            return self.models
        return tuple(t for t in self.models if t in job.gpu_types)

    def per_worker(self, job: m.JobRequest) -> Amounts:
        """Share of one worker per allowed model, plus TOTAL (the smallest of them)."""
        key = (job.gpu, job.gpu_memory_mib, job.gpu_types)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        out: Amounts = {}
        for model_name in self.allowed_models(job):
            if job.gpu_memory_mib is not None and job.gpu <= 0:
                share = fit.gpu_share(0.0, job.gpu_memory_mib, self._memory[model_name])
                out[model_name] = 1.0 if share is None else share
            else:
                out[model_name] = job.gpu
        out[m.TOTAL] = min(out.values()) if out else job.gpu
        self._cache[key] = out
        return out

    def total(self, job: m.JobRequest) -> float:
        return job.workers * self.per_worker(job)[m.TOTAL]


class Ledger:
    """GPUs each queue holds, its subtree included, in total and per model."""

    def __init__(self, tree: QueueTree) -> None:
        self.tree = tree
        self.usage: dict[str, Amounts] = {name: defaultdict(float) for name in tree.queues}

    def add(self, queue: str, use: Mapping[str, float], sign: float = 1.0) -> None:
        for name in self.tree.chains.get(queue, ()):
            bucket = self.usage[name]
            for key, amount in use.items():
                bucket[key] += sign * amount

    def of(self, queue: str, key: str = m.TOTAL) -> float:
        return self.usage[queue].get(key, 0.0)

    def over_limit(
        self, queue: str, model: str | None, amount: float
    ) -> tuple[str, str, float, float] | None:
        """The first queue in the chain that `amount` more GPUs (of `model`) would take
        over a limit, as (queue, key, holds, limit); None when all limits allow it."""
        for name in self.tree.chains.get(queue, ()):
            q = self.tree.queues[name]
            keys: Sequence[str] = (m.TOTAL,) if model is None else (m.TOTAL, model)
            for key in keys:
                cap = limit(q, key)
                if cap is not None and self.of(name, key) + amount > cap + m.EPS:
                    return name, key, self.of(name, key), cap
        return None


def build_ledger(
    tree: QueueTree, running: Iterable[m.RunningJob], nodes: Mapping[str, m.Node]
) -> Ledger:
    ledger = Ledger(tree)
    for job in running:
        if job.job.queue in tree.queues:
            ledger.add(job.job.queue, running_usage(job, nodes))
    return ledger


def demand(
    tree: QueueTree, ledger: Ledger, pending: Iterable[m.JobRequest], est: PendingGpus
) -> dict[str, Amounts]:
    """Usage plus pending requests per queue (subtree), total and per allowed model.
    A job that may run on several models counts toward each of them; an elastic job
    with all the workers it could use (its fair share sets the size it starts at)."""
    out: dict[str, Amounts] = {name: defaultdict(float, ledger.usage[name]) for name in tree.queues}
    for job in pending:
        chain = tree.chains.get(job.queue)
        if chain is None:
            continue
        per = est.per_worker(job)
        workers = max(job.workers, job.max_workers)
        for name in chain:
            bucket = out[name]
            for key, share in per.items():
                bucket[key] += workers * share
    return {name: dict(v) for name, v in out.items()}
