"""`GET /api/v1/jobs/{id}/explain`: the core's full account of one job's fate, computed on
a snapshot built from the store the way the loop builds it (inventory, queues, live jobs,
the wall clock now, the default policy `Config`)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Path

from api.deps import PrincipalDep, SessionDep
from scheduler.core import explain as core_explain
from scheduler.core import model
from scheduler.spec import Phase
from scheduler.store import cycle, jobs

router = APIRouter(prefix="/jobs", tags=["jobs"])


@router.get("/{job_id}/explain", response_model=core_explain.Explanation)
def explain_job(
    session: SessionDep,
    principal: PrincipalDep,
    job_id: str = Path(min_length=1, max_length=32),
) -> core_explain.Explanation:
    """Fair-share arithmetic, place in the order, decision and the best candidate nodes."""
    jobs.get_job(session=session, job_id=job_id, queues=principal.visible_queues)
    live = cycle.live_jobs(session=session)
    running = tuple(r for j in live if (r := j.running()) is not None)
    pending = tuple(j.request for j in live if j.phase in (Phase.PENDING, Phase.PREEMPTED))
    snapshot = model.Snapshot(
        nodes=cycle.load_inventory(session=session),
        queues=cycle.load_queues(session=session),
        running=running,
        pending=pending,
        now=time.time(),
    )
    return core_explain.explain(snapshot, job_id)
