"""Store rows -> the API's Public models."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from api import models, usage
from api.auth import Principal
from scheduler.spec import STORED, JobSpec, Phase, text
from scheduler.store import draining, estimates, resizes, schema
from scheduler.store.db import Session
from scheduler.store.views import node_enforcement, session_of


def queue(row: schema.QueueRow) -> models.QueuePublic:
    return models.QueuePublic(
        name=row.name,
        parent=row.parent,
        guaranteed=row.guaranteed,
        limit=row.limit,
        weight=row.weight,
        priority=row.priority,
        allowed=row.allowed,
        created_at=row.created_at,
        updated_at=row.updated_at,
        version=row.version,
    )


def job(row: schema.JobRow, spec: JobSpec | None = None) -> models.JobPublic:
    """`spec`: the job's spec when the caller has it validated already (a submission)."""
    reason = None
    if row.pending_code is not None:
        reason = models.PendingReasonPublic(
            code=row.pending_code,
            message=row.pending_message or "",
            details=row.pending_details or {},
        )
    spec_ = _spec(row) if spec is None else spec
    return models.JobPublic(
        id=row.id,
        name=row.name,
        queue=row.queue,
        submitter=row.submitter,
        spec=spec_,
        phase=Phase(row.phase),
        priority=row.priority,
        conditions=[models.Condition.model_validate(c) for c in row.conditions]
        + _stopping(row.id, session_of(row)),
        placements=[_placement(p, _enforcement(session_of(row))) for p in row.placements],
        workers=_workers(row, spec_),
        resizes=_resizes(row, session_of(row)) if spec_.elastic else [],
        pending_reason=reason,
        estimated_start=_estimate(row) if row.phase == Phase.PENDING else None,
        attempt=row.attempt,
        restarts=row.restarts,
        cancel_requested=row.cancel_requested,
        created_at=row.created_at,
        scheduled_at=row.scheduled_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        version=row.version,
    )


def jobs(rows: Sequence[schema.JobRow]) -> list[models.JobPublic]:
    """`job` of each row of a page; the pending ones' estimates read in one query."""
    pending = [r.id for r in rows if r.phase == Phase.PENDING]
    session = session_of(rows[0]) if rows else None
    if session is not None and pending:
        found = estimates.of_many(session=session, job_ids=pending)
        known = session.info.setdefault(_ESTIMATES, {})
        known.update({job_id: found.get(job_id) for job_id in pending})
    return [job(r) for r in rows]


_ESTIMATES = "shoal.estimates"  # session.info: job id -> its estimate (None: none), read


def _estimate(row: schema.JobRow) -> models.StartEstimatePublic | None:
    session = session_of(row)
    if session is None:
        return None
    known: dict[str, estimates.StartEstimate | None] = session.info.get(_ESTIMATES, {})
    got = known[row.id] if row.id in known else estimates.of(session=session, job_id=row.id)
    if got is None:
        return None
    return models.StartEstimatePublic(
        at=got.start_at,
        position=got.position,
        basis=got.basis,
        unknown=got.unknown,
        computed_at=got.computed_at,
        # Said by the server, on its clock: a reader must never take a passed `at` for
        # "now" (issue 35: `#1 now` for 30 s while the job was still blocked).
        overdue=got.start_at is not None and got.start_at < datetime.now(UTC),
    )


def _workers(row: schema.JobRow, spec: JobSpec) -> int:
    """Its workers now; a finished elastic job's, the size it ended at."""
    if row.placements:
        return len(row.placements)
    session = session_of(row)
    if spec.elastic and Phase(row.phase).finished and session is not None:
        return resizes.last_size(session=session, job_id=row.id) or spec.min_workers
    return spec.min_workers


def _resizes(row: schema.JobRow, session: Session | None) -> list[models.ResizePublic]:
    if session is None:
        return []
    return [
        models.ResizePublic(
            at=r.at, attempt=r.attempt, previous=r.previous, workers=r.workers, message=r.message
        )
        for r in map(resizes.Resized.of, resizes.history(session=session, job_id=row.id))
    ]


def _stopping(job_id: str, session: Session | None) -> list[models.Condition]:
    """`WorkersStopping` while workers of the job still stop (a cancelled job is
    Cancelled at once; its GPUs are held until they are gone), read once per session."""
    if session is None:
        return []
    found: dict[str, list[draining.Draining]] | None = session.info.get("shoal.draining")
    if found is None:
        found = {}
        for d in draining.load(session=session):
            found.setdefault(d.job_id, []).append(d)
        session.info["shoal.draining"] = found
    out = []
    for d in found.get(job_id, ()):
        left = max(0, math.ceil(d.until - time.time()))
        out.append(
            models.Condition(
                type="WorkersStopping",
                status="True",
                reason="Draining",
                message=f"{len(d.placements)} worker(s) of attempt {d.attempt} still "
                f"stopping, holding their GPUs until gone (grace period: {left}s left)",
                last_transition_time=d.since.isoformat(),
            )
        )
    return out


def _enforcement(session: Session | None) -> dict[str, str]:
    """node -> how it enforces fractions, read once per session (a page of jobs)."""
    if session is None:
        return {}
    found: dict[str, str] | None = session.info.get("shoal.enforcement")
    if found is None:
        found = node_enforcement(session=session)
        session.info["shoal.enforcement"] = found
    return found


def _placement(data: dict[str, Any], enforcement: dict[str, str]) -> models.Placement:
    p = models.Placement.model_validate(data)
    if p.enforcement is not None and p.node in enforcement:
        p.enforcement = enforcement[p.node]  # a fraction: what its node does
    return p


def _spec(row: schema.JobRow) -> JobSpec:
    """The stored spec. One an older version let in that no longer validates (a number
    out of today's bounds) is shown without the fields at fault, rather than failing
    every listing of it (the loop gives the job a `JobError` reason saying why). A lone
    surrogate an older version stored is shown as U+FFFD (it cannot be sent as UTF-8)."""
    raw = text.repaired(row.spec) if text.has_surrogate(row.spec) else row.spec
    try:
        return JobSpec.model_validate(raw, context=STORED)
    except ValidationError as exc:
        bad = {e["loc"][0] for e in exc.errors() if e["loc"]}
    try:
        kept = {k: v for k, v in raw.items() if k not in bad}
        return JobSpec.model_validate(kept, context=STORED)
    except ValidationError:
        return JobSpec.model_construct(**raw)


def event(row: schema.JobEventRow) -> models.JobEventPublic:
    return models.JobEventPublic(
        at=row.at, kind=row.kind, reason=row.reason, message=row.message, data=row.data
    )


def nodes(u: usage.Usage, principal: Principal) -> models.NodesPublic:
    out, now = [], time.time()
    for n in u.nodes:
        gpus = []
        for i in range(n.gpu_count):
            shares = [
                models.GpuShare(
                    job_id=s.job_id if principal.sees(s.queue) else None,
                    queue=s.queue if principal.sees(s.queue) else None,
                    worker=s.worker,
                    fraction=s.fraction,
                    draining=s.draining_until is not None,
                    stops_in_seconds=None
                    if s.draining_until is None
                    else max(0, math.ceil(s.draining_until - now)),
                )
                for s in u.shares.get((n.name, i), ())
            ]
            allocated = u.allocated(n.name, i)
            gpus.append(
                models.GpuPublic(
                    index=i,
                    model=n.gpu_model,
                    memory_mib=n.gpu_memory_mib,
                    allocated=allocated,
                    free=round(max(0.0, 1.0 - allocated), 6),
                    shares=shares,
                )
            )
        out.append(
            models.NodePublic(
                name=n.name,
                cpu_milli=n.cpu_milli,
                memory_mib=n.memory_mib,
                gpu_model=n.gpu_model,
                gpu_memory_mib=n.gpu_memory_mib,
                enforcement=str(n.enforcement),
                labels=dict(n.labels),
                taints=[
                    models.TaintPublic(key=t.key, value=t.value, effect=t.effect) for t in n.taints
                ],
                gpus=gpus,
            )
        )
    return models.NodesPublic(data=out)


def summary(
    u: usage.Usage,
    queues: list[schema.QueueRow],
    phases: dict[str, int],
) -> models.ClusterSummary:
    by_model = {
        m: models.GpuTotals(total=t, allocated=round(a, 6), idle=round(t - a, 6))
        for m, (t, a) in u.by_model().items()
    }
    total = sum(t.total for t in by_model.values())
    allocated = round(sum(t.allocated for t in by_model.values()), 6)
    # A parent queue holds what its children hold (the core's `QueueTree.rollup`).
    held, pending, running = u.by_queue_tree(), u.pending_by_queue(), u.running_by_queue()
    usages = [
        models.QueueUsage(
            name=q.name,
            allocated=held.get(q.name, 0.0),
            guaranteed=float(q.guaranteed.get("total") or 0.0),
            limit=None if q.limit is None or q.limit.get("total") is None else q.limit["total"],
            pending=pending.get(q.name, 0),
            running=running.get(q.name, 0),
        )
        for q in queues
    ]
    return models.ClusterSummary(
        gpus=models.GpuTotals(
            total=total,
            allocated=allocated,
            idle=round(total - allocated, 6),
            draining=u.draining(),
        ),
        by_model=by_model,
        queues=usages,
        pending=sum(u.pending for u in usages),
        jobs_by_phase=phases,
    )
