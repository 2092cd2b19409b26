"""Who holds which share of which GPU: the inventory joined with live jobs' placements.

Shared by `GET /nodes`, `GET /cluster/summary` and the /metrics collector.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from scheduler.core.model import Node
from scheduler.spec import Phase
from scheduler.store import cycle


@dataclass(frozen=True, slots=True)
class Share:
    job_id: str
    queue: str
    worker: int
    fraction: float


@dataclass
class Usage:
    nodes: tuple[Node, ...]
    live: list[cycle.LiveJob]
    shares: dict[tuple[str, int], list[Share]] = field(default_factory=dict)

    def allocated(self, node: str, index: int) -> float:
        return min(1.0, sum(s.fraction for s in self.shares.get((node, index), ())))

    def by_queue(self) -> dict[str, float]:
        """GPUs each queue holds (fractions summed)."""
        out: dict[str, float] = defaultdict(float)
        for shares in self.shares.values():
            for s in shares:
                out[s.queue] += s.fraction
        return dict(out)

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


def compute(session: Session) -> Usage:
    usage = Usage(cycle.load_inventory(session=session), cycle.live_jobs(session=session))
    for job in usage.live:
        if job.running() is None:
            continue
        for p in job.placements:
            for gpu in p.gpus:
                usage.shares.setdefault((p.node, gpu), []).append(
                    Share(job.id, job.request.queue, p.worker, p.fraction)
                )
    return usage
