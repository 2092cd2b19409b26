"""The order in which one cycle tries pending jobs.

Called by `cycle.schedule` and `explain` (queue position). Within a queue: priority
(higher first), then submission time, then id. Across queues the order is interleaved
as if every job before it had been admitted (Kueue/KAI style): the next job comes from
the queue that would then be furthest below its fair share. Work that fits inside its
queue's guarantee goes before work that would borrow, so a guarantee is never crowded
out by borrowers in the same cycle. A heap over queues keeps this O(P log Q).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping

from scheduler import model as m
from scheduler.core import accounting, fairshare


def job_key(job: m.JobRequest) -> tuple[int, float, str]:
    """Within one queue: higher priority first, then older, then by id."""
    return (-job.priority, job.submitted_at, job.id)


def _queue_key(
    queue: m.Queue, usage: float, share: float, head_gpus: float
) -> tuple[int, float, float, str]:
    borrows = usage + head_gpus > accounting.guaranteed(queue, m.TOTAL) + m.EPS
    ratio = usage / share if share > m.EPS else (float("inf") if usage > 0 else 1e18)
    return (int(borrows), ratio, -queue.weight, queue.name)


def order_pending(
    pending: Iterable[m.JobRequest],
    tree: accounting.QueueTree,
    shares: Mapping[str, fairshare.QueueShare],
    ledger: accounting.Ledger,
    est: accounting.PendingGpus,
) -> list[m.JobRequest]:
    """Pending jobs of known queues in the order the cycle tries them."""
    by_queue: dict[str, list[m.JobRequest]] = defaultdict(list)
    for job in pending:
        if job.queue in tree.queues:
            by_queue[job.queue].append(job)
    for jobs in by_queue.values():
        jobs.sort(key=job_key, reverse=True)  # pop() from the end takes the first
    usage = {name: ledger.of(name) for name in by_queue}
    heap: list[tuple[tuple[int, float, float, str], str]] = []

    def push(name: str) -> None:
        head = by_queue[name][-1]
        key = _queue_key(tree.queues[name], usage[name], shares[name].total.share, est.total(head))
        heapq.heappush(heap, (key, name))

    for name in sorted(by_queue):
        push(name)
    ordered: list[m.JobRequest] = []
    while heap:
        _, name = heapq.heappop(heap)
        job = by_queue[name].pop()
        ordered.append(job)
        usage[name] += est.total(job)
        if by_queue[name]:
            push(name)
    return ordered
