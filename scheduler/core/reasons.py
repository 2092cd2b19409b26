"""Pending reasons a person can act on: which rule held the job back, with numbers,
and what it would take to fit.

Called by `admission`, `preemption` and `reservation` when a job stays pending; the
placement-side reasons (no node, GPU type, fragmentation) are the `PendingReason`s
`scheduler.placement.place_gang` returns, passed through unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler import model as m


def _gpus(key: str) -> str:
    return "GPUs" if key == m.TOTAL else f"{key} GPUs"


def unknown_queue(job: m.JobRequest) -> m.PendingReason:
    if not job.queue:  # a foreign pod without the label
        said = "it names no queue: give the pod the label shoal.dev/queue=<queue>"
    else:
        said = f"queue {job.queue} does not exist; create it or resubmit to an existing queue"
    return m.PendingReason(m.ReasonCode.UNKNOWN_QUEUE, said, {"queue": job.queue})


def over_limit(
    job: m.JobRequest,
    queue: str,
    key: str,
    holds: float,
    limit: float,
    need: float,
    *,
    above: tuple[str, str, float, float] | None = None,
) -> m.PendingReason:
    """The job's queue (or an ancestor) would go over a limit. `above`: an ancestor of
    that queue whose own limit the job would break too (queue, key, holds, limit)."""
    parent = queue != job.queue
    code = m.ReasonCode.PARENT_LIMIT if parent else m.ReasonCode.QUEUE_LIMIT
    whose = f"parent queue {queue} of {job.queue}" if parent else f"queue {queue}"
    free = max(0.0, limit - holds)
    details: dict[str, object] = {
        "queue": queue, "resource": key, "holds": holds, "limit": limit, "needs": need
    }  # fmt: skip
    if above is None:
        raise_it = f" or the limit is raised to {holds + need:g}"
    else:
        # A child's limit cannot go above its parent's: raising this one alone won't do.
        raise_it = (
            f"; raising its limit alone would not do: its parent {above[0]} holds "
            f"{above[2]:g} of its limit {above[3]:g} {_gpus(above[1])}"
        )
        details["parentLimit"] = {"queue": above[0], "holds": above[2], "limit": above[3]}
    return m.PendingReason(
        code,
        f"{whose} holds {holds:g} of its limit {limit:g} {_gpus(key)}; the job needs "
        f"{need:g}: it fits when {need - free:g} {_gpus(key)} of {queue} are released" + raise_it,
        details,
    )


def waiting_for_preemption(
    victims: Sequence[m.RunningJob],
    gpus: float,
    stopping: Sequence[str],
    budgets: Sequence[str] = (),
) -> m.PendingReason:
    """`budgets`: what the stopping jobs' stops wait for ("ns/name: why" of each
    disruption budget that refused one)."""
    names = list(dict.fromkeys(v.job.id for v in victims))
    whole = [v.job.label for v in victims if v.split_from < 0]
    shrunk: dict[str, int] = {}
    for v in victims:
        if v.split_from >= 0:
            shrunk[v.job.label] = shrunk.get(v.job.label, 0) + 1
    parts = []
    if whole:
        parts.append(f"preempting {', '.join(whole)}")
    if shrunk:
        parts.append("shrinking " + ", ".join(f"{j} by {n}" for j, n in shrunk.items()))
    if names:
        parts[-1] += f" ({gpus:g} GPUs)"
    if stopping:
        parts.append(f"waiting for {', '.join(stopping)} to stop")
    parts.extend(f"waiting for PodDisruptionBudget {b}" for b in budgets)
    details: dict[str, object] = {"victims": names, "victim_gpus": gpus, "stopping": list(stopping)}
    if budgets:
        details["disruption_budgets"] = list(budgets)
    return m.PendingReason(
        m.ReasonCode.WAITING_FOR_PREEMPTION,
        f"{'; '.join(parts)}; the job is placed once they have stopped",
        details,
    )


def _clock(t: float) -> str:
    """Epoch seconds as a UTC time of day (the core has no datetime: plain arithmetic).
    Reasons name instants, never a countdown from `now`: a stored reason then stays the
    same from cycle to cycle, and is rewritten only when the situation changes."""
    secs = int(t) % 86400
    return f"{secs // 3600:02d}:{secs % 3600 // 60:02d}:{secs % 60:02d} UTC"


def waiting_for_min_runtime(
    job: m.JobRequest,
    victims: Sequence[m.RunningJob],
    young: Sequence[m.RunningJob],
    min_runtime_s: float,
    now: float,
    claim: str,
) -> m.PendingReason:
    """Room exists once victims that are still within their minimum runtime may go.
    `claim`: what the job's queue takes them by ("guarantee", "fair share"; "": its
    priority within its own queue)."""
    at = max(r.started_at + min_runtime_s for r in young)
    gpus = sum(p.gpus_held for v in victims for p in v.placements)
    names = ", ".join(f"{v.job.label} in queue {v.job.queue}" for v in victims)
    why = {
        "guarantee": f"queue {job.queue} is below its guarantee",
        "fair share": f"queue {job.queue} is within its fair share and their workers "
        "beyond their minimum are borrowed",
    }.get(claim, f"it outranks them in queue {job.queue}")
    return m.PendingReason(
        m.ReasonCode.WAITING_FOR_PREEMPTION,
        f"reclaiming {gpus:g} GPUs from job {names} ({why}); they become preemptible at "
        f"{_clock(at)} (after the minimum runtime of {min_runtime_s:g}s), and the job is "
        "placed once they have stopped",
        {
            "victims": [v.job.id for v in victims],
            "victim_gpus": gpus,
            "stopping": [],
            "preemptibleAt": at,
            "minRuntimeSeconds": min_runtime_s,
        },
    )


def reserved(
    job: m.JobRequest, holder: str, nodes: Sequence[str], start: float | None, now: float
) -> m.PendingReason:
    """A lower-ordered job would take room held for a starving job."""
    when = f"at about {_clock(start)}" if start is not None else "when running jobs end"
    fix = (
        f"declare a maxRuntime that ends before {_clock(start)} to backfill"
        if start is not None and start > now
        else "wait for the reservation to start"
    )
    return m.PendingReason(
        m.ReasonCode.RESERVED,
        f"the free room that fits it on {', '.join(nodes[:5])} is reserved for job {holder}, "
        f"which starts {when}; {fix}",
        {"reserved_for": holder, "nodes": list(nodes), "estimated_start": start},
    )


def with_reservation(
    reason: m.PendingReason, nodes: Sequence[str], start: float | None, now: float
) -> m.PendingReason:
    """A starving job's own reason, noting the room now held for it."""
    when = f"at about {_clock(start)}" if start is not None else "as running jobs end"
    return m.PendingReason(
        reason.code,
        f"{reason.message}; room on {', '.join(nodes[:5])} is reserved for it, "
        f"expected free {when}",
        {**reason.details, "reserved_nodes": list(nodes), "estimated_start": start},
    )
