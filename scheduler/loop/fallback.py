"""A stand-in for `scheduler.core.cycle.schedule` while the core is being written.

First fit in submission order, gangs whole or not at all, fractions packed onto the
fullest GPU that still fits; no fair share, no preemption. `service.schedule_fn` uses it
only when `scheduler.core.cycle` does not exist, and logs that it does.
"""

from __future__ import annotations

from scheduler.core import model


def schedule(snapshot: model.Snapshot) -> model.CycleResult:
    free: dict[tuple[str, int], float] = {
        (n.name, g): 1.0 for n in snapshot.nodes for g in range(n.gpu_count)
    }
    for r in snapshot.running:
        for p in r.placements:
            for g in p.gpus:
                free[(p.node, g)] = free.get((p.node, g), 1.0) - p.fraction
    places, pending = [], []
    for job in sorted(snapshot.pending, key=lambda j: (-j.priority, j.submitted_at)):
        trial = dict(free)
        out: list[model.WorkerPlacement] = []
        for w in range(job.workers):
            share = job.gpu if job.gpu > 0 else 1.0
            if share < 1:
                fits = [k for k, f in trial.items() if f + model.EPS >= share]
                if not fits:
                    break
                k = min(fits, key=lambda k: (trial[k], k))
                trial[k] -= share
                out.append(model.WorkerPlacement(w, k[0], (k[1],), share))
            else:
                need = int(share)
                nodes = sorted({n for n, _ in trial})
                chosen = None
                for n in nodes:
                    whole = [g for (nn, g), f in trial.items() if nn == n and f >= 1 - model.EPS]
                    if len(whole) >= need:
                        chosen = (n, tuple(sorted(whole)[:need]))
                        break
                if chosen is None:
                    break
                for g in chosen[1]:
                    trial[(chosen[0], g)] = 0.0
                out.append(model.WorkerPlacement(w, chosen[0], chosen[1], 1.0))
        if len(out) == job.workers:
            free = trial
            places.append(model.Place(job.id, tuple(out)))
        else:
            reason = model.PendingReason(
                model.ReasonCode.NO_NODE, f"no room for all {job.workers} workers"
            )
            pending.append(model.KeepPending(job.id, reason))
    return model.CycleResult(places=tuple(places), pending=tuple(pending))
