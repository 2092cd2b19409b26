"""Jobs: submit (idempotent with Idempotency-Key), list, get, cancel, delete, events.

A name is unique among a queue's live jobs (409 naming `name` for a second one); a
finished job may be deleted (its name was free again already).

Every query is restricted to the caller's visible queues, so another team's job is
"not found" rather than "forbidden".
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Path, Query, Response, status
from starlette.concurrency import run_in_threadpool

from api import models, redact, views
from api.auth import Principal, Role
from api.deps import DatabaseDep, FeasibilityDep, PrincipalDep, ServicesDep, SessionDep
from api.errors import fail, feasibility_error
from api.feasibility_cache import FeasibilitySnapshot
from scheduler import feasibility
from scheduler.spec import Phase
from scheduler.store import events, jobs, paging, retention, rows, submission
from scheduler.store.db import Database

router = APIRouter(prefix="/jobs", tags=["jobs"])
JobId = Path(min_length=1, max_length=32)


@router.post(
    "",
    response_model=models.JobPublic,
    status_code=status.HTTP_201_CREATED,
    responses={200: {"model": models.JobPublic, "description": "replay of an Idempotency-Key"}},
)
async def submit_job(
    body: models.JobCreate,
    db: DatabaseDep,
    principal: PrincipalDep,
    snapshot: FeasibilityDep,
    services: ServicesDep,
    idempotency_key: Annotated[
        str | None,
        Header(alias="Idempotency-Key", min_length=1, max_length=255),
    ] = None,
) -> Response:
    """Submit a job. With `Idempotency-Key`, a retry with the same body returns the same
    job (200); the same key with another body is refused (422)."""
    if principal.role in (Role.VIEWER, Role.WORKER):
        raise fail(403, f"role {principal.role} is read-only")
    # What this backend cannot run (the local backend mounts no claims), before the store.
    refusals = services.wiring.spec_refusals
    if refusals is not None and (refused := refusals.spec_refusals(body)):
        raise feasibility_error([feasibility.Problem(loc, why) for loc, why in refused])
    # One thread-pool hop for all the database work: a session dependency and a plain
    # `def` route cost three (session open, route, session close).
    return await run_in_threadpool(_submit, db, body, principal, snapshot, idempotency_key)


def _submit(
    db: Database,
    body: models.JobCreate,
    principal: Principal,
    snapshot: FeasibilitySnapshot,
    idempotency_key: str | None,
) -> Response:
    with db.session() as session:
        # Queues the caller may not submit to are reported as unknown (no existence leak).
        problems = snapshot.check_job(session, body, may_submit=principal.may_submit)
        if problems:
            raise feasibility_error(problems)
        row, created = submission.submit_job(
            session=session, spec=body, submitter=principal.user, idempotency_key=idempotency_key
        )
    # Serialized here, not through `response_model`: FastAPI would dump the model to a
    # dict, validate that again and only then encode it.
    public = views.job(row, spec=body if created else None)
    code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return Response(public.model_dump_json(by_alias=True), code, media_type="application/json")


@router.get("", response_model=models.JobsPublic)
def list_jobs(
    session: SessionDep,
    principal: PrincipalDep,
    queue: Annotated[str | None, Query(max_length=63)] = None,
    phase: Phase | None = None,
    submitter: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=paging.MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
) -> models.JobsPublic:
    """Jobs newest first; follow `nextCursor` for older ones."""
    page = jobs.list_jobs(
        session=session,
        queues=principal.visible_queues,
        queue=queue,
        phase=phase,
        submitter=submitter,
        limit=limit,
        cursor=cursor,
    )
    items = redact.jobs(session, principal, views.jobs(page.items))
    return models.JobsPublic(data=items, next_cursor=page.next_cursor)


@router.get("/{job_id}", response_model=models.JobPublic)
def get_job(session: SessionDep, principal: PrincipalDep, job_id: str = JobId) -> models.JobPublic:
    """One job with its placements and pending reason."""
    row = rows.get_job(session=session, job_id=job_id, queues=principal.visible_queues)
    return redact.jobs(session, principal, [views.job(row)])[0]


@router.post("/{job_id}/cancel", response_model=models.JobPublic)
def cancel_job(
    session: SessionDep, principal: PrincipalDep, job_id: str = JobId
) -> models.JobPublic:
    """Cancel: a pending job at once; a running one once the scheduler stops its workers."""
    row = rows.get_job(session=session, job_id=job_id, queues=principal.visible_queues)
    if not principal.may_submit(row.queue):
        raise fail(403, f"role {principal.role} may not cancel jobs")
    row = jobs.cancel_job(session=session, job_id=job_id, by=principal.user)
    return redact.jobs(session, principal, [views.job(row)])[0]


@router.delete("/{job_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_job(session: SessionDep, principal: PrincipalDep, job_id: str = JobId) -> Response:
    """Delete a finished job and its history (409 while it is live: cancel it first)."""
    row = rows.get_job(session=session, job_id=job_id, queues=principal.visible_queues)
    if not principal.may_submit(row.queue):
        raise fail(403, f"role {principal.role} may not delete jobs")
    retention.delete_job(session=session, job_id=job_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{job_id}/events", response_model=models.JobEventsPublic)
def job_events(
    session: SessionDep,
    principal: PrincipalDep,
    job_id: str = JobId,
    limit: Annotated[int, Query(ge=1, le=paging.MAX_PAGE)] = paging.MAX_PAGE,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
    order: Annotated[Literal["asc", "desc"], Query(description="asc: oldest first")] = "asc",
) -> models.JobEventsPublic:
    """The job's history, a page at a time (oldest first by default)."""
    page = events.events_page(
        session=session,
        job_id=job_id,
        queues=principal.visible_queues,
        limit=limit,
        cursor=cursor,
        newest_first=order == "desc",
    )
    items = redact.events(session, principal, [views.event(r) for r in page.items])
    return models.JobEventsPublic(data=items, next_cursor=page.next_cursor)
