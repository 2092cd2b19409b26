"""When a quiet cycle's outcome could next change as time alone passes (the simulator
skips idle ticks up to then): the core's own instants (`scheduler.core.timing`), the
end of every backoff, and `maxRuntime` deadlines that reconcile enforces."""

from __future__ import annotations

from collections.abc import Iterable

from scheduler import model
from scheduler.core import timing
from scheduler.loop.backoff import Backoff


def next_change(snapshot: model.Snapshot, backoffs: Iterable[Backoff]) -> float | None:
    """Earliest time >= `snapshot.now` at which a cycle on an unchanged store and
    backend may act differently; None: never (only new events can change it)."""
    now = snapshot.now
    times = [t for t in (timing.next_change(snapshot),) if t is not None]
    times += [t for b in backoffs if (t := b.next_expiry(now)) is not None]
    times += [
        r.started_at + r.job.max_runtime_s
        for r in snapshot.running
        if not r.stopping and r.job.max_runtime_s is not None
    ]
    return min((t for t in times if t >= now), default=None)
