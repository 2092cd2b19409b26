"""Hierarchical weighted water-filling: every queue's fair share of the GPUs.

Called once per cycle by `cycle.schedule` (to order queues) and by `explain` (to show
the arithmetic). For each key (all GPUs, then each GPU model) the roots divide the
cluster's capacity and every parent divides its own share among its children:

1. each child is entitled to min(guarantee, limit, demand); if those entitlements
   exceed what the parent has, they are scaled down in proportion;
2. what is left goes to children whose demand is not yet met, in proportion to
   weight, each capped at min(limit, demand) (water-filling).

Demand is usage plus pending requests, so an idle queue's guarantee is lent out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler import model as m
from scheduler.core import accounting

_SELF = ""  # pseudo-child for jobs submitted to a parent queue itself


@dataclass(frozen=True, slots=True)
class Share:
    """One queue's fair share for one key, with the numbers it came from."""

    guaranteed: float
    limit: float | None
    weight: float
    usage: float
    demand: float
    entitled: float  # min(guarantee, limit, demand), scaled if guarantees oversubscribe
    pool: float  # what its parent (or the cluster) had to divide
    share: float  # entitled plus its weighted part of the pool's leftover


@dataclass(frozen=True, slots=True)
class QueueShare:
    name: str
    total: Share
    by_model: Mapping[str, Share]

    def of(self, key: str) -> Share | None:
        return self.total if key == m.TOTAL else self.by_model.get(key)


def water_fill(amount: float, caps: Sequence[float], weights: Sequence[float]) -> list[float]:
    """Split `amount` in proportion to weights, no one above its cap; zero-weight
    entries get nothing. Returns each entry's part (sum <= amount)."""
    given = [0.0] * len(caps)
    active = [i for i in range(len(caps)) if weights[i] > 0 and caps[i] > m.EPS]
    # Those with the smallest cap per weight saturate first.
    active.sort(key=lambda i: (caps[i] / weights[i], i))
    remaining = max(0.0, amount)
    wsum = sum(weights[i] for i in active)
    for pos, i in enumerate(active):
        level = remaining / wsum if wsum > 0 else 0.0
        if caps[i] <= level * weights[i]:
            given[i] = caps[i]
            remaining -= caps[i]
            wsum -= weights[i]
            continue
        for j in active[pos:]:
            given[j] = level * weights[j]
        break
    return given


def _split(
    pool: float,
    names: Sequence[str],
    key: str,
    tree: accounting.QueueTree,
    usage: Mapping[str, Mapping[str, float]],
    demand: Mapping[str, Mapping[str, float]],
    parent: str | None,
    out: dict[str, dict[str, Share]],
) -> None:
    """Divide `pool` among sibling queues `names` (children of `parent`), then recurse."""
    entries: list[tuple[str, float, float | None, float, float, float]] = []
    for name in names:
        q = tree.queues[name]
        entries.append(
            (
                name,
                accounting.guaranteed(q, key),
                accounting.limit(q, key),
                q.weight,
                usage[name].get(key, 0.0),
                demand[name].get(key, 0.0),
            )
        )
    if parent is not None:
        # Jobs of the parent itself compete as a child with no guarantee and weight 1.
        own_use = usage[parent].get(key, 0.0) - sum(e[4] for e in entries)
        own_demand = demand[parent].get(key, 0.0) - sum(e[5] for e in entries)
        if own_demand > m.EPS:
            entries.append((_SELF, 0.0, None, 1.0, max(0.0, own_use), own_demand))
    caps = [min(d, lim) if lim is not None else d for (_, _, lim, _, _, d) in entries]
    entitled = [min(g, c) for (_, g, *_), c in zip(entries, caps, strict=True)]
    total_entitled = sum(entitled)
    if total_entitled > pool + m.EPS:
        scale = pool / total_entitled if total_entitled > 0 else 0.0
        entitled = [e * scale for e in entitled]
    leftover = pool - sum(entitled)
    extra = water_fill(
        leftover,
        [max(0.0, c - e) for c, e in zip(caps, entitled, strict=True)],
        [e[3] for e in entries],
    )
    for i, (name, g, lim, w, use, d) in enumerate(entries):
        if name == _SELF:
            continue
        share = entitled[i] + extra[i]
        out[name][key] = Share(g, lim, w, use, d, entitled[i], pool, share)
        kids = tree.children.get(name, ())
        if kids:
            _split(share, kids, key, tree, usage, demand, name, out)


def compute(
    tree: accounting.QueueTree,
    capacity: Mapping[str, float],
    usage: Mapping[str, Mapping[str, float]],
    demand: Mapping[str, Mapping[str, float]],
) -> dict[str, QueueShare]:
    """Fair share of every queue, in total and per GPU model of the cluster.
    `usage` and `demand` are per queue with its subtree included."""
    per_queue: dict[str, dict[str, Share]] = {name: {} for name in tree.queues}
    roots = tree.children.get(None, ())
    keys = [m.TOTAL, *sorted(k for k in capacity if k != m.TOTAL)]
    for key in keys:
        _split(capacity.get(key, 0.0), roots, key, tree, usage, demand, None, per_queue)
    return {
        name: QueueShare(
            name,
            shares[m.TOTAL],
            {k: v for k, v in shares.items() if k != m.TOTAL},
        )
        for name, shares in per_queue.items()
    }
