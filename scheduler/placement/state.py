"""The mutable free-resource state of the cluster that placement works on.

Built once per cycle by `scheduler.core` (and by the benchmarks) from the snapshot's
nodes and running jobs; `place_gang` reads it, the core commits decisions with
`allocate`, and what-ifs (gangs, preemption trials, reservations) are undone with
`checkpoint`/`rollback` of its `undo.UndoLog`, which the core's cycle session shares
with the rest of the cycle's state. What the state holds is keyed by an `Owner`: a
job id (a job placed in this cycle), a running entry's `model.RunKey` (job id and
attempt: a draining earlier attempt is an owner of its own), or a typed `Hold` (room
held for a reservation, not a job).

GPU shares are kept as integers in units of 1e-9 of a GPU (`UNIT`), the `EPS` of the
core model: sums are exact, so four 0.25 workers fill a GPU, and a rollback restores
every number bit for bit. Nodes are grouped into classes by their state signature
(`Sig`); policies score a class once, which keeps a placement far below a scan of
every node and GPU.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from scheduler import model as m
from scheduler.placement import fragmentation
from scheduler.placement.fragmentation import WorkloadMix
from scheduler.placement.shares import UNIT, Sig, Tag, units
from scheduler.placement.undo import UndoLog

__all__ = ["UNIT", "ClusterState", "Hold", "Owner", "Sig", "Tag", "units", "view"]

_Job = tuple[tuple[m.WorkerPlacement, ...], int, int]  # placements, cpu, mem per worker


def view(classes: dict[Sig, list[int]], only: frozenset[int] | None) -> dict[Sig, list[int]]:
    """The node classes with only the members in `only` (all of them when None): the
    nodes a job's node rules allow (`eligible.tiers`)."""
    if only is None:
        return classes
    out = {}
    for s, members in classes.items():
        kept = [i for i in members if i in only]
        if kept:
            out[s] = kept
    return out


class Hold(NamedTuple):
    """Room held on one node for a starving job's reservation. `gpu` parts carry GPU
    shares only; the host part carries the CPU and memory."""

    job_id: str
    node: str
    gpu: bool


Owner = str | m.RunKey | Hold  # who holds resources: a job, a running entry or a hold


class ClusterState:
    """Free CPU, memory and per-GPU share of every node, with an undo log."""

    def __init__(self, nodes: Iterable[m.Node], log: UndoLog | None = None) -> None:
        self.log = log if log is not None else UndoLog()
        self.log.after_rollback(self._regroup)
        self._dirty: set[int] = set()
        self.nodes: list[m.Node] = list(nodes)
        self.index: dict[str, int] = {n.name: i for i, n in enumerate(self.nodes)}
        self.cpu: list[int] = [n.cpu_milli for n in self.nodes]
        self.mem: list[int] = [n.memory_mib for n in self.nodes]
        self.gpu: list[list[int]] = [[UNIT] * n.gpu_count for n in self.nodes]
        self.tags: list[dict[Tag, int]] = [{} for _ in self.nodes]
        self.sig: list[Sig] = [self._make_sig(i) for i in range(len(self.nodes))]
        self.classes: dict[Sig, list[int]] = {}
        for i, s in enumerate(self.sig):
            self.classes.setdefault(s, []).append(i)
        # The classes with some free GPU share: all a GPU worker needs to look at.
        self.open: dict[Sig, list[int]] = {
            s: ms for s, ms in self.classes.items() if s.shares and s.shares[0] > 0
        }
        self.jobs: dict[Owner, _Job] = {}
        # CPU and memory per worker of placements handed out by `place_gang`, so that
        # `allocate(job_id, placements)` needs no more than the contract gives it. By
        # identity first (two jobs may be handed equal tuples), then by value.
        self._handed: dict[int, tuple[tuple[m.WorkerPlacement, ...], int, int]] = {}
        self._by_value: dict[tuple[m.WorkerPlacement, ...], tuple[int, int]] = {}
        # The target workload of `fgd` when `place_gang` is given none: set it from
        # pending and recent jobs; else `fgd` uses what `learner` has seen.
        self.mix: WorkloadMix | None = None
        self.learner = fragmentation.MixLearner(self.log)
        # What the policies derive from this state and keep for as long as it lives (one
        # cycle): their scorers (`policies.per_cycle`), keyed by factory, and the like.
        self.cache: dict[object, object] = {}

    @staticmethod
    def build(
        nodes: Iterable[m.Node], running: Sequence[m.RunningJob], log: UndoLog | None = None
    ) -> ClusterState:
        """The state with every running job's placements subtracted. Placements on
        unknown nodes or GPUs are skipped (the invariant check reports them), and drift
        that over-allocates is recorded as it is rather than refused."""
        state = ClusterState(nodes, log)
        for run in running:
            placed = tuple(state._known(p) for p in run.placements if p.node in state.index)
            state._apply(run.key, placed, run.job.cpu_milli, run.job.memory_mib, log=False)
        for run in running:
            state.learner.add(run.job)
        state.log.commit()
        return state

    def _known(self, p: m.WorkerPlacement) -> m.WorkerPlacement:
        """`p` on GPU indices the node has. A node that shrank under a running worker
        (on Kubernetes, other pods took GPUs since: indices there are Shoal's own count,
        the device plugin picks the card) has it counted on the freest GPUs it still
        offers, so nothing is handed out twice; with none left it holds none (the
        invariant check reports `unknown-gpu`)."""
        free = self.gpu[self.index[p.node]]
        if not p.gpus or max(p.gpus) < len(free):
            return p
        kept = [g for g in p.gpus if g < len(free)]
        spare = sorted((g for g in range(len(free)) if g not in kept), key=lambda g: -free[g])
        moved = spare[: len(p.gpus) - len(kept)]
        return dataclasses.replace(p, gpus=tuple(sorted(kept + moved)))

    # -- queries -------------------------------------------------------------------

    def gpu_model_of(self, node: str) -> str:
        return self.nodes[self.index[node]].gpu_model

    def free_cpu(self, node: str) -> int:
        return self.cpu[self.index[node]]

    def free_memory(self, node: str) -> int:
        return self.mem[self.index[node]]

    def gpu_free(self, node: str) -> tuple[float, ...]:
        """Free share of each GPU of the node, by GPU index."""
        return tuple(u / UNIT for u in self.gpu[self.index[node]])

    def allocated_gpu_share(self) -> float:
        """GPUs held in total (sum of the shares taken)."""
        held = sum(len(g) * UNIT - sum(g) for g in self.gpu)
        return held / UNIT

    def holds(self, owner: Owner) -> bool:
        return owner in self.jobs

    # -- changes -------------------------------------------------------------------

    def allocate(
        self,
        job_id: Owner,
        placements: tuple[m.WorkerPlacement, ...],
        request: m.JobRequest | None = None,
    ) -> None:
        """Take the placements' resources. CPU and memory per worker come from
        `request`, or from the `place_gang` call that produced these placements.
        Raises ValueError (and changes nothing) when anything would go over."""
        handed = self._handed.get(id(placements))
        if request is not None:
            cpu, mem = request.cpu_milli, request.memory_mib
        elif handed is not None and handed[0] is placements:
            cpu, mem = handed[1], handed[2]
        elif placements in self._by_value:
            cpu, mem = self._by_value[placements]
        else:
            raise ValueError(f"no CPU/memory known for {job_id}: pass request=")
        self.take(job_id, placements, cpu, mem)

    def take(
        self, owner: Owner, placements: tuple[m.WorkerPlacement, ...], cpu: int, mem: int
    ) -> None:
        """Take placements with `cpu`/`mem` per worker (ValueError, no change, when
        anything would go over)."""
        if owner in self.jobs:
            raise ValueError(f"{owner} already holds resources")
        self._check(placements, cpu, mem)
        self._apply(owner, placements, cpu, mem, log=True)

    def release(self, job_id: Owner) -> None:
        """Give back everything the job holds."""
        placements, cpu, mem = self.jobs[job_id]
        self._apply(job_id, placements, -cpu, -mem, log=True, sign=-1)

    def handed_out(self, placements: tuple[m.WorkerPlacement, ...], cpu: int, mem: int) -> None:
        """Record the per-worker CPU and memory of placements `place_gang` returns."""
        self._handed[id(placements)] = (placements, cpu, mem)
        self._by_value[placements] = (cpu, mem)

    def checkpoint(self) -> int:
        return self.log.checkpoint()

    def rollback(self, mark: int) -> None:
        """Undo every change since `checkpoint()` returned `mark` (in the whole log)."""
        self.log.rollback(mark)

    def take_worker(self, i: int, cpu: int, mem: int, gpus: tuple[int, ...], share: int) -> None:
        """Take one worker's resources on node `i` (logged; used inside gang trials)."""
        self._save(i)
        self.cpu[i] -= cpu
        self.mem[i] -= mem
        free = self.gpu[i]
        for g in gpus:
            free[g] -= share
        tag = (len(gpus), share)
        self.tags[i][tag] = self.tags[i].get(tag, 0) + 1
        self._reclass(i)

    def hide_gpu(self, i: int, g: int) -> None:
        """Show GPU `g` of node `i` as full (logged; used inside gang trials): the rest
        of a GPU that a worker of a distinct-GPU job took is not for its other workers."""
        self._save(i)
        self.gpu[i][g] = 0
        self._reclass(i)

    # -- internals -----------------------------------------------------------------

    def _check(self, placements: tuple[m.WorkerPlacement, ...], cpu: int, mem: int) -> None:
        need: dict[int, list[int]] = {}
        for p in placements:
            if p.node not in self.index:
                raise ValueError(f"unknown node {p.node}")
            i = self.index[p.node]
            acc = need.setdefault(i, [0, 0] + [0] * len(self.gpu[i]))
            acc[0] += cpu
            acc[1] += mem
            for g in p.gpus:
                if not 0 <= g < len(self.gpu[i]):
                    raise ValueError(f"node {p.node} has no GPU {g}")
                acc[2 + g] += units(p.fraction)
        for i, acc in need.items():
            name = self.nodes[i].name
            if acc[0] > self.cpu[i] or acc[1] > self.mem[i]:
                raise ValueError(f"node {name} has not enough CPU or memory free")
            if any(a > f for a, f in zip(acc[2:], self.gpu[i], strict=True)):
                raise ValueError(f"node {name}: a GPU would go above 1.0")

    def _apply(
        self,
        job_id: Owner,
        placements: tuple[m.WorkerPlacement, ...],
        cpu: int,
        mem: int,
        *,
        log: bool,
        sign: int = 1,
    ) -> None:
        saved: set[int] = set()
        for p in placements:
            i = self.index[p.node]
            if i not in saved:
                if log:
                    self._save(i)
                saved.add(i)
            self.cpu[i] -= cpu
            self.mem[i] -= mem
            share = units(p.fraction)
            free = self.gpu[i]
            for g in p.gpus:
                free[g] -= sign * share
            tag = (len(p.gpus), share)
            count = self.tags[i].get(tag, 0) + sign
            if count > 0:
                self.tags[i][tag] = count
            else:
                self.tags[i].pop(tag, None)
        if log:
            self.log.record(self._restore_job, job_id, self.jobs.get(job_id))
        if sign > 0:
            self.jobs[job_id] = (placements, cpu, mem)
        else:
            del self.jobs[job_id]
        for i in saved:
            self._reclass(i)

    def _save(self, i: int) -> None:
        self.log.record(
            self._restore_node, i, self.cpu[i], self.mem[i], list(self.gpu[i]), dict(self.tags[i])
        )

    def _restore_node(
        self, i: int, cpu: int, mem: int, gpus: list[int], tags: dict[Tag, int]
    ) -> None:
        self.cpu[i], self.mem[i], self.gpu[i], self.tags[i] = cpu, mem, gpus, tags
        self._dirty.add(i)

    def _restore_job(self, owner: Owner, old: _Job | None) -> None:
        if old is None:
            del self.jobs[owner]
        else:
            self.jobs[owner] = old

    def _regroup(self) -> None:
        """After a rollback: re-class the nodes it restored."""
        for i in self._dirty:
            self._reclass(i)
        self._dirty.clear()

    def _make_sig(self, i: int) -> Sig:
        n = self.nodes[i]
        shares = tuple(sorted(self.gpu[i], reverse=True))
        return Sig(n.gpu_model, n.gpu_memory_mib, n.cpu_milli, n.memory_mib,
                   self.cpu[i], self.mem[i], shares, n.enforcement.enforcing,
                   n.slices, bool(n.no_sharing))  # fmt: skip

    def _reclass(self, i: int) -> None:
        old, new = self.sig[i], self._make_sig(i)
        if old == new:
            return
        members = self.classes[old]
        del members[bisect.bisect_left(members, i)]
        if not members:
            del self.classes[old]
            self.open.pop(old, None)
        self.sig[i] = new
        into = self.classes.get(new)
        if into is None:
            self.classes[new] = [i]
            if new.shares and new.shares[0] > 0:
                self.open[new] = self.classes[new]
        else:
            bisect.insort(into, i)
