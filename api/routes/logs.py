"""Worker output and progress: GET /jobs/{id}/logs, POST /jobs/{id}/progress.

Logs come from whatever the serving process wired in (`api.services.Wiring.log_source`,
an object with `log_files(job_id) -> [(attempt, worker, path)]`; `shoal serve` gives its
backend). Without one the endpoint answers 501. Reads are by byte offset per worker, so
`shoal logs -f` polls for what is new. Progress is what the worker launcher posts
(heartbeat, step, loss); worker 0's progress is kept as a `Progress` event, at most one
every two seconds per job (a `final` report once per attempt skips the wait), so `shoal
job` can show the latest loss. Bounded: a report holds at most 32 flat values in 4 KiB,
and only a job's newest 50 Progress events are kept.
"""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import APIRouter, Path, Query, Response, status
from pydantic import Field, field_validator

from api import models
from api.auth import Role
from api.deps import AnyRoleDep, PrincipalDep, ServicesDep, SessionDep
from api.errors import ErrorBody, fail
from scheduler.spec import Phase
from scheduler.spec.text import UserInput
from scheduler.store.events import append_event, prune_events
from scheduler.store.rows import get_job

router = APIRouter(prefix="/jobs", tags=["jobs"])
JobId = Path(min_length=1, max_length=32)
MAX_CHUNK = 256 * 1024
MAX_OFFSET = 2**53  # far beyond any log, and safe for every client's numbers (JSON)
MAX_ATTEMPT = 2**31 - 1  # attempts are stored in 32-bit columns
MAX_WORKERS = 4096  # as scheduler.spec.JobSpec.workers
_OFFSETS = ["query", "offsets"]
PROGRESS_EVERY_S = 2.0
PROGRESS_KEEP = 50  # Progress events kept per job (older ones are deleted)
PROGRESS_MAX_KEYS = 32
PROGRESS_MAX_BYTES = 4096
PROGRESS_MAX_KEY = 64
# Jobs whose last report time is remembered (the throttle); the oldest are forgotten.
PROGRESS_REMEMBER = 10_000


class LogChunk(models._Model):
    attempt: int
    worker: int
    offset: int
    next_offset: int
    text: str


class LogsPublic(models._Model):
    job_id: str
    attempt: int | None
    chunks: list[LogChunk]


class ProgressReport(models._Model, UserInput):
    """No NUL, lone surrogate, NaN or infinity anywhere (`UserInput`): PostgreSQL's JSON
    refuses them."""

    attempt: int = Field(ge=0, le=2**31 - 1)
    worker: int = Field(ge=0, le=4095)
    progress: dict[str, Any] = Field(
        default_factory=dict,
        description=f"at most {PROGRESS_MAX_KEYS} flat values (number, bool, string, null), "
        f"{PROGRESS_MAX_BYTES} bytes as JSON",
    )
    final: bool = False  # the worker's command has ended: kept once per attempt

    @field_validator("progress")
    @classmethod
    def _bounded(cls, v: dict[str, Any]) -> dict[str, Any]:
        if len(v) > PROGRESS_MAX_KEYS:
            raise ValueError(f"at most {PROGRESS_MAX_KEYS} values")
        for key, value in v.items():
            if len(key) > PROGRESS_MAX_KEY:
                raise ValueError(f"key {key[:20]!r}... is over {PROGRESS_MAX_KEY} characters")
            if value is not None and not isinstance(value, bool | int | float | str):
                raise ValueError(f"{key[:20]!r} must be a number, bool, string or null")
        if len(json.dumps(v)) > PROGRESS_MAX_BYTES:
            raise ValueError(f"over {PROGRESS_MAX_BYTES} bytes as JSON")
        return v


@router.get(
    "/{job_id}/logs",
    response_model=LogsPublic,
    responses={501: {"model": ErrorBody, "description": "this backend keeps no logs here"}},
)
def job_logs(
    services: ServicesDep,
    session: SessionDep,
    principal: PrincipalDep,
    job_id: str = JobId,
    attempt: int | None = Query(
        default=None, ge=0, le=MAX_ATTEMPT, description="default: the latest"
    ),
    offsets: str = Query(
        default="",
        max_length=MAX_WORKERS * 20,
        description=f"comma-separated byte offsets by worker, each 0 to {MAX_OFFSET}",
    ),
) -> LogsPublic:
    """Each worker's output of one attempt from the given byte offsets (256 KiB at most)."""
    starts = _offsets(offsets)
    get_job(session=session, job_id=job_id, queues=principal.visible_queues)
    source = services.wiring.log_source
    if source is None:
        raise fail(501, "this backend keeps no worker logs here; read them on the cluster")
    files = source.log_files(job_id)
    if attempt is None and files:
        attempt = max(a for a, _, _ in files)
    chunks = []
    for a, worker, path in files:
        if a != attempt:
            continue
        start = starts[worker] if worker < len(starts) else 0
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(MAX_CHUNK)
        chunks.append(
            LogChunk(
                attempt=a,
                worker=worker,
                offset=start,
                next_offset=start + len(data),
                text=data.decode(errors="replace"),
            )
        )
    return LogsPublic(job_id=job_id, attempt=attempt, chunks=chunks)


def _offsets(offsets: str) -> list[int]:
    """The byte offset of each worker, or a 422 naming `offsets` and what is wrong."""
    if not offsets:
        return []
    parts = offsets.split(",")
    if len(parts) > MAX_WORKERS:
        raise fail(422, f"at most {MAX_WORKERS} offsets (one per worker)", loc=_OFFSETS)
    starts = []
    for i, part in enumerate(parts):
        part = part.strip()
        if not part.isascii() or not part.isdigit() or len(part) > 19:
            raise fail(
                422,
                f"offset {i} ({part[:24]!r}) is not a byte offset: an integer 0 to {MAX_OFFSET}",
                loc=_OFFSETS,
            )
        if int(part) > MAX_OFFSET:
            raise fail(422, f"offset {i} is over {MAX_OFFSET}, beyond any log", loc=_OFFSETS)
        starts.append(int(part))
    return starts


def _forget_oldest(memory: dict[Any, Any]) -> None:
    while len(memory) > PROGRESS_REMEMBER:
        del memory[next(iter(memory))]


@router.post("/{job_id}/progress", status_code=status.HTTP_204_NO_CONTENT)
def report_progress(
    body: ProgressReport,
    services: ServicesDep,
    session: SessionDep,
    principal: AnyRoleDep,
    job_id: str = JobId,
) -> Response:
    """A worker's heartbeat and progress (from the worker launcher, with the token of
    its own job, until the job has finished; a worker token is good for nothing else)."""
    if principal.role in (Role.VIEWER, Role.METRICS):
        raise fail(403, f"role {principal.role} is read-only")
    if principal.role is Role.WORKER:
        if principal.job != job_id:  # another job: as if it did not exist
            raise fail(404, f"job {job_id} does not exist", loc=["path", "job_id"])
        row = get_job(session=session, job_id=job_id)
        if Phase(row.phase).finished:
            raise fail(
                403,
                f"job {job_id} has finished ({row.phase}): its worker token is no longer valid",
                loc=["header", "Authorization"],
            )
    else:
        get_job(session=session, job_id=job_id, queues=principal.visible_queues)
    last, finals = services.progress.seen, services.progress.final
    now = time.monotonic()
    # A final report skips the throttle once per attempt; repeats of it do not.
    final = body.final and (job_id, body.attempt) not in finals
    due = final or now - last.get(job_id, 0.0) >= PROGRESS_EVERY_S
    if body.worker == 0 and body.progress and due:
        last.pop(job_id, None)  # re-inserted last: the dicts forget the oldest first
        last[job_id] = now
        if final:
            finals[(job_id, body.attempt)] = None
        _forget_oldest(last)
        _forget_oldest(finals)
        step, loss = body.progress.get("step"), body.progress.get("loss")
        append_event(
            session=session,
            job_id=job_id,
            kind="Progress",
            message=f"step {step}" + (f" loss {loss}" if loss is not None else ""),
            data={"attempt": body.attempt, **body.progress},
        )
        prune_events(session=session, job_id=job_id, kind="Progress", keep=PROGRESS_KEEP)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
