"""Per-queue figures for the dashboard and /metrics: guarantee, limit, fair share,
allocated, borrowed, lent and pending, each parent with its whole subtree.

The fair share is the core's own (`scheduler.core.fairshare.compute` on a snapshot built
from the store the way the loop builds it), so the numbers here are the numbers the
scheduler orders queues by. Borrowed is what a queue holds above its guarantee. Lent is
the unused part of a queue's guarantee that its siblings (the queues under the same
parent, or the other top-level queues) are borrowing: each sibling with unused guarantee
is counted as lending in proportion to how much it leaves unused.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

from api import usage
from scheduler import model as m
from scheduler.core import accounting, workingset
from scheduler.loop import snapshot as snapshots
from scheduler.store.db import Session
from scheduler.store.port import SqlLiveStore


@dataclass(frozen=True, slots=True)
class QueueStats:
    name: str
    parent: str | None
    depth: int  # 0 for a top-level queue
    guaranteed: float
    limit: float | None
    weight: float
    fair_share: float
    allocated: float  # its jobs' and its descendants' GPUs
    borrowed: float
    lent: float
    pending_jobs: int
    pending_gpus: float
    running_jobs: int
    children: tuple[str, ...]


def snapshot(
    session: Session, config: m.Config | None = None, now: float | None = None
) -> m.Snapshot:
    """The store as the loop would hand it to the core now: the loop's own builder
    (`scheduler.loop.snapshot`), with the policy the loop runs (`Wiring.core_config`;
    the default `Config` where none was set) and the wall clock the loop reads."""
    return snapshots.from_store(
        SqlLiveStore(session), config=config or m.Config(), now=time.time() if now is None else now
    )


def _r(x: float) -> float:
    return round(x, 6)


def compute(snap: m.Snapshot) -> list[QueueStats]:
    """Every queue, parents before their children (depth-first, names in order)."""
    ctx = workingset.with_fair_shares(snap)
    tree, est, ledger, shares = ctx.tree, ctx.est, ctx.ledger, ctx.shares
    own_pending: dict[str, float] = defaultdict(float)
    own_pending_gpus: dict[str, float] = defaultdict(float)
    own_running: dict[str, float] = defaultdict(float)
    for job in snap.pending:
        own_pending[job.queue] += 1
        own_pending_gpus[job.queue] += est.total(job)
    for run in snap.running:
        own_running[run.job.queue] += 1
    pending = usage.rounded(tree.rollup(own_pending))
    pending_gpus = usage.rounded(tree.rollup(own_pending_gpus))
    running = usage.rounded(tree.rollup(own_running))

    allocated = {name: _r(ledger.of(name)) for name in tree.queues}
    guaranteed = {name: accounting.guaranteed(q, m.TOTAL) for name, q in tree.queues.items()}
    borrowed = {n: _r(max(0.0, allocated[n] - guaranteed[n])) for n in tree.queues}
    lent = _lent(tree, guaranteed, allocated, borrowed)

    out: list[QueueStats] = []

    def visit(name: str, depth: int) -> None:
        q = tree.queues[name]
        kids = tree.children.get(name, ())
        out.append(
            QueueStats(
                name=name,
                parent=q.parent if q.parent in tree.queues else None,
                depth=depth,
                guaranteed=guaranteed[name],
                limit=accounting.limit(q, m.TOTAL),
                weight=q.weight,
                fair_share=_r(shares[name].total.share),
                allocated=allocated[name],
                borrowed=borrowed[name],
                lent=lent.get(name, 0.0),
                pending_jobs=int(pending.get(name, 0)),
                pending_gpus=_r(pending_gpus.get(name, 0.0)),
                running_jobs=int(running.get(name, 0)),
                children=kids,
            )
        )
        for kid in kids:
            visit(kid, depth + 1)

    for root in tree.children.get(None, ()):
        visit(root, 0)
    return out


def _lent(
    tree: accounting.QueueTree,
    guaranteed: dict[str, float],
    allocated: dict[str, float],
    borrowed: dict[str, float],
) -> dict[str, float]:
    """What each queue lends: its unused guarantee, in proportion to what its siblings
    borrow (all of it once they borrow as much as the siblings leave unused)."""
    lent: dict[str, float] = {}
    for siblings in tree.children.values():
        unused = {n: max(0.0, guaranteed[n] - allocated[n]) for n in siblings}
        total_unused = sum(unused.values())
        total_borrowed = sum(borrowed[n] for n in siblings)
        ratio = min(1.0, total_borrowed / total_unused) if total_unused > m.EPS else 0.0
        for n in siblings:
            lent[n] = _r(unused[n] * ratio)
    return lent


def visible(stats: list[QueueStats], queues: frozenset[str] | None) -> list[QueueStats]:
    """Only the queues a caller may see (None: all)."""
    return stats if queues is None else [s for s in stats if s.name in queues]
