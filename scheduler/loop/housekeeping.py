"""What the loop does after a cycle's decisions, besides scheduling: the retention TTL,
the files of deleted jobs, a backend's records of finished jobs, and the one report of
workers that run out of this replica's sight, or of a stop a disruption budget holds."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from scheduler.backends import base
from scheduler.clock import as_datetime
from scheduler.loop import phases
from scheduler.store import port
from scheduler.store.changes import EventWrite
from scheduler.store.live import LiveJob
from scheduler.store.port import LiveStore

log = logging.getLogger(__name__)

EVERY = 30  # the TTL and the file sweep run every 30th cycle: a cheap indexed query at most


def purge(database: port.Storage, ttl_s: float | None, cycle: int, now: float) -> None:
    """Apply the retention TTL (finished jobs older than `ttl_s` go, with their events)."""
    if ttl_s is None or cycle % EVERY:
        return
    with port.opened(database) as db:
        gone = db.purge_finished(finished_before=as_datetime(now - ttl_s))
    if gone:
        log.info("deleted %d finished job(s) past the retention of %.0fs", len(gone), ttl_s)


def drop_deleted_files(database: port.Storage, files: base.JobFiles | None, cycle: int) -> None:
    """Remove the files a backend keeps per job (the local backend's logs) of jobs the
    store no longer has: `DELETE /jobs/{id}` and the TTL reach only the store."""
    if files is None or cycle % EVERY:
        return
    with port.opened(database) as db:
        gone = db.deleted_among(job_ids=files.kept_jobs())
    for job_id in sorted(gone):
        files.drop_files(job_id)


def forget_finished(
    records: base.FinishedRecords | None,
    attempts: Mapping[phases.AttemptKey, list[base.WorkerStatus]],
    live: Mapping[str, LiveJob],
) -> None:
    """Let a backend that keeps records (local) drop those of finished jobs whose
    workers are all gone, so its bookkeeping does not grow with history."""
    if records is None:
        return
    done: dict[str, bool] = {}
    for (job_id, _), workers in attempts.items():
        ended = all(
            w.state in (base.WorkerState.SUCCEEDED, base.WorkerState.FAILED) for w in workers
        )
        done[job_id] = done.get(job_id, True) and ended and job_id not in live
    for job_id, ok in done.items():
        if ok:
            records.forget(job_id)


def report_elsewhere(
    db: LiveStore, reported: Mapping[str, str], found: Mapping[str, str], now: float
) -> dict[str, str]:
    """Say once per job that its workers run out of this replica's sight (`found`: job
    id -> the instance that launched them; `reported`: what was said before). Returns
    what has now been said."""
    for job_id, instance in found.items():
        if reported.get(job_id) == instance:
            continue
        message = (
            f"its workers were launched by another replica's local backend ({instance}), "
            "which this one can neither see nor stop; they are left alone, not launched "
            "again. The local backend supports one replica per database: restart that "
            "replica (same state directory), or cancel the job"
        )
        log.error("job %s: %s", job_id, message)
        _event(db, job_id, "WorkersElsewhere", "ReplicaMismatch", message, now)
    return dict(found)


def report_blocked(
    db: LiveStore, reported: Mapping[str, str], found: Mapping[str, str], now: float
) -> dict[str, str]:
    """Say on a draining job's events, once per budget, that its stop waits for a
    disruption budget (`found`: job id -> "ns/name: why"; `reported`: what was said
    before). Returns what has now been said."""
    for job_id, why in found.items():
        if reported.get(job_id) == why:
            continue
        message = f"waiting for PodDisruptionBudget {why}"
        log.info("job %s: %s", job_id, message)
        _event(db, job_id, "StopWaiting", "DisruptionBudget", message, now)
    return dict(found)


def _event(db: LiveStore, job_id: str, kind: str, reason: str, message: str, now: float) -> None:
    """Append an event to the job's record; a job deleted meanwhile has none to take it."""
    db.append_events(events=[EventWrite(job_id, kind, reason, message)], now=as_datetime(now))
