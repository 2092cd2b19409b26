"""The cycle session: every piece of state a cycle changes, behind one undo log.

Built by `workingset.WorkingSet.build`; admission, preemption, reservations and explain
change the cycle's state only through it. It owns the free capacity
(`placement.ClusterState`, whose FGD mix learner logs into the same log), the queue
ledger, the GPUs in use per model, and the reservation holds (typed
`placement.Hold` entries, not jobs). `checkpoint`/`rollback`/`commit` and the
`trial()` block cover all of them at once (KAI-Scheduler's Statement): a trial that
releases victims, moves their GPUs off their queues' books and places a gang is undone
by one rollback.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from scheduler import model as m
from scheduler import placement
from scheduler.core import accounting

HoldPart = tuple[placement.Hold, tuple[m.WorkerPlacement, ...], int, int]


class Session:
    def __init__(
        self,
        state: placement.ClusterState,
        ledger: accounting.Ledger,
        nodes: Mapping[str, m.Node],
        used_by_model: dict[str, float],
    ) -> None:
        self.state = state
        self.log = state.log
        self.ledger = ledger
        self.nodes = nodes
        self._used = used_by_model
        self._held: dict[str, tuple[placement.Hold, ...]] = {}  # by the job held for

    # -- the log ---------------------------------------------------------------------

    def checkpoint(self) -> int:
        return self.log.checkpoint()

    def rollback(self, mark: int) -> None:
        self.log.rollback(mark)

    def commit(self) -> None:
        """What was done so far is the base; nothing before it can be rolled back."""
        self.log.commit()

    @contextmanager
    def trial(self) -> Iterator[int]:
        """A what-if over all cycle state, undone on leaving the block."""
        with self.log.trial() as mark:
            yield mark

    # -- reads -------------------------------------------------------------------------

    def used(self, key: str) -> float:
        """GPUs in use of one model (or m.TOTAL), as this cycle's decisions left them."""
        return self._used.get(key, 0.0)

    def held(self, job_id: str) -> tuple[placement.Hold, ...]:
        """The holds taken for `job_id`'s reservation (empty when none)."""
        return self._held.get(job_id, ())

    def usage_of(self, placements: Sequence[m.WorkerPlacement]) -> dict[str, float]:
        """GPUs placements hold, in total and per model of their nodes."""
        use: dict[str, float] = {}
        for p in placements:
            node = self.nodes.get(p.node)
            for key in (m.TOTAL, node.gpu_model if node is not None else ""):
                use[key] = use.get(key, 0.0) + p.gpus_held
        return use

    # -- changes -----------------------------------------------------------------------

    def allocate(self, job: m.JobRequest, placements: Sequence[m.WorkerPlacement]) -> None:
        """An admission: the cluster state, the queue ledger and the per-model usage."""
        self.state.allocate(job.id, tuple(placements), request=job)
        self._count(job.queue, self.usage_of(placements), 1.0)

    def release(self, run: m.RunningJob) -> None:
        """A running job gone (a victim, or a trial's): its room and its books."""
        self.state.release(run.key)
        self._count(run.job.queue, accounting.running_usage(run, self.nodes), -1.0)

    def hold(self, job_id: str, nodes: Sequence[Sequence[HoldPart]]) -> None:
        """Take room for `job_id`'s reservation: per node, its parts in order, each
        (hold, placements, CPU and memory per placement). The first part that no
        longer fits ends its node's (rounding at the edge of a GPU)."""
        taken: list[placement.Hold] = []
        for parts in nodes:
            for hold, placements, cpu, mem in parts:
                try:
                    self.state.take(hold, placements, cpu, mem)
                except ValueError:
                    break
                taken.append(hold)
        self._set_held(job_id, (*self.held(job_id), *taken))

    def lift(self, job_id: str) -> None:
        """Give back the room held for `job_id`."""
        for hold in self.held(job_id):
            self.state.release(hold)
        self._set_held(job_id, ())

    # -- internals ---------------------------------------------------------------------

    def _count(self, queue: str, use: Mapping[str, float], sign: float) -> None:
        self.ledger.add(queue, use, sign)
        for key, amount in use.items():
            self._used[key] = self._used.get(key, 0.0) + sign * amount
        self.log.record(self._uncount, queue, use, sign)

    def _uncount(self, queue: str, use: Mapping[str, float], sign: float) -> None:
        self.ledger.add(queue, use, -sign)
        for key, amount in use.items():
            self._used[key] = self._used.get(key, 0.0) - sign * amount

    def _set_held(self, job_id: str, holds: tuple[placement.Hold, ...]) -> None:
        self.log.record(self._restore_held, job_id, self._held.get(job_id))
        if holds:
            self._held[job_id] = holds
        else:
            self._held.pop(job_id, None)

    def _restore_held(self, job_id: str, old: tuple[placement.Hold, ...] | None) -> None:
        if old is None:
            self._held.pop(job_id, None)
        else:
            self._held[job_id] = old
