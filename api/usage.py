"""Who holds which share of which GPU: the inventory joined with live jobs' placements
and the workers still stopping (`scheduler.store.draining`: shown as draining, not idle).

Shared by `GET /nodes`, `GET /cluster/summary` and the /metrics collector. Amounts are
rounded to 6 decimals (four 0.25 shares and a 0.9 that was 0.1 + 0.8 read as 1.0 and 0.9,
not 0.8999999999999999). `Usage.by_queue_tree` gives a parent queue what its whole
subtree holds, with the core's roll-up (`accounting.QueueTree.rollup`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.core import accounting
from scheduler.model import Node
from scheduler.spec import Phase
from scheduler.store import draining
from scheduler.store.cluster import load_inventory, load_queues
from scheduler.store.db import Session
from scheduler.store.live import LiveJob, live_jobs


@dataclass(frozen=True, slots=True)
class Share:
    job_id: str
    queue: str
    worker: int
    fraction: float
    # A worker still stopping (its job cancelled, preempted, failed...): when its grace
    # period ends (epoch seconds). None: held by a job that runs.
    draining_until: float | None = None


@dataclass
class Usage:
    nodes: tuple[Node, ...]
    live: list[LiveJob]
    tree: accounting.QueueTree  # the queues, for the roll-up to parents
    shares: dict[tuple[str, int], list[Share]] = field(default_factory=dict)

    def allocated(self, node: str, index: int) -> float:
        return round(min(1.0, sum(s.fraction for s in self.shares.get((node, index), ()))), 6)

    def by_queue(self) -> dict[str, float]:
        """GPUs each queue's own jobs hold (fractions summed)."""
        out: dict[str, float] = defaultdict(float)
        for shares in self.shares.values():
            for s in shares:
                out[s.queue] += s.fraction
        return {q: round(v, 6) for q, v in out.items()}

    def by_queue_tree(self) -> dict[str, float]:
        """GPUs held by each queue's jobs and its descendants' (a department's total)."""
        return rounded(self.tree.rollup(self.by_queue()))

    def draining(self) -> float:
        """GPUs held by workers still stopping (counted in `allocated` too)."""
        held = sum(
            s.fraction for sh in self.shares.values() for s in sh if s.draining_until is not None
        )
        return round(held, 6)

    def by_model(self) -> dict[str, tuple[float, float]]:
        """model -> (total GPUs, allocated GPUs)."""
        out: dict[str, tuple[float, float]] = {}
        for n in self.nodes:
            if n.gpu_count == 0:
                continue
            total, used = out.get(n.gpu_model, (0.0, 0.0))
            alloc = sum(self.allocated(n.name, i) for i in range(n.gpu_count))
            out[n.gpu_model] = (total + n.gpu_count, used + alloc)
        return out

    def pending_by_queue(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for j in self.live:
            if j.phase in (Phase.PENDING, Phase.PREEMPTED):
                out[j.request.queue] += 1
        return dict(out)

    def running_by_queue(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for j in self.live:
            if j.phase in (Phase.SCHEDULED, Phase.RUNNING):
                out[j.request.queue] += 1
        return dict(out)


def rounded(amounts: Mapping[str, float]) -> dict[str, float]:
    """Amounts as shown: to 6 decimals (see the module doc)."""
    return {q: round(v, 6) for q, v in amounts.items()}


def compute(session: Session) -> Usage:
    live = live_jobs(session=session, unreadable=[])  # an unreadable row: left out
    tree = accounting.QueueTree.build(load_queues(session=session))
    usage = Usage(load_inventory(session=session), live, tree)
    for job in usage.live:
        if job.running() is None:
            continue
        for p in job.placements:
            for gpu in p.gpus:
                usage.shares.setdefault((p.node, gpu), []).append(
                    Share(job.id, job.request.queue, p.worker, p.fraction)
                )
    for d in draining.load(session=session):  # their GPUs are held until they are gone
        for p in d.placements:
            for gpu in p.gpus:
                usage.shares.setdefault((p.node, gpu), []).append(
                    Share(d.job_id, d.queue, p.worker, p.fraction, d.until)
                )
    return usage
