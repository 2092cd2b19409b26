"""A job's page under /ui/jobs/{id}: facts, placements, explain, events, and the live
tail of each worker's log (polled; `static/dashboard.js` keeps the reader's place)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import Response

from api import redact, views
from api.dashboard.routes import (
    LOG_TAIL,
    _database,
    _not_found,
    _page,
    _principal,
    _services,
    _to_login,
    templates,
)
from api.routes import explain as explain_route
from scheduler.store import errors
from scheduler.store.events import list_events
from scheduler.store.rows import get_job

log = logging.getLogger(__name__)
router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("/jobs/{job_id}", response_model=None)
def job_page(request: Request, job_id: str) -> Response:
    principal = _principal(request)
    if principal is None:
        return _to_login(request)
    with _database(request).session() as session:
        try:
            row = get_job(session=session, job_id=job_id, queues=principal.visible_queues)
        except errors.NotFound:
            return _not_found(request, principal, f"job {job_id}")
        job = redact.jobs(session, principal, [views.job(row)])[0]
        events = redact.events(
            session,
            principal,
            [
                views.event(e)
                for e in list_events(
                    session=session, job_id=job_id, queues=principal.visible_queues
                )
            ],
        )
        try:
            explanation = explain_route.explain_job(_services(request), session, principal, job_id)
        except Exception:  # the page still shows the job when its account cannot be made
            log.exception("explain failed for job %s", job_id)
            explanation = None
    return _page(
        request,
        "job.html",
        principal,
        job=job,
        events=list(reversed(events))[:200],
        explain=explanation,
        has_logs=_services(request).wiring.log_source is not None,
    )


@router.get("/jobs/{job_id}/logs", response_model=None)
def job_logs(request: Request, job_id: str) -> Response:
    """The last 64 KiB of each worker's output of the latest attempt (polled)."""
    principal = _principal(request)
    if principal is None:
        return _to_login(request)
    with _database(request).session() as session:
        try:
            get_job(session=session, job_id=job_id, queues=principal.visible_queues)
        except errors.NotFound:
            return _not_found(request, principal, f"job {job_id}")
    source = _services(request).wiring.log_source
    files = source.log_files(job_id) if source is not None else []
    latest = max((a for a, _, _ in files), default=None)
    tails = []
    for attempt, worker, path in sorted(files, key=lambda f: f[1]):
        if attempt != latest:
            continue
        try:
            with open(path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - LOG_TAIL))
                tails.append((worker, f.read().decode(errors="replace")))
        except OSError:
            tails.append((worker, ""))
    response = templates.TemplateResponse(
        request, "_logs.html", {"attempt": latest, "tails": tails, "job_id": job_id}
    )
    response.headers["Cache-Control"] = "no-store"
    return response
