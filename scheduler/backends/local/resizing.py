"""The records side of resizing an elastic attempt in place (`base.Resizable`).

A grow adds a record for each worker of the new placements the attempt lacks, before
`starting` starts it (as a launch records an attempt before its first process), so a
crash in between leaves the attempt unlaunched and a repeated grow (or launch) finishes
it. A shrink is `stopping.request_workers`: the removed workers stay in the record, and
in `workers()`, until their processes are gone, so the loop keeps their GPUs until then.

The loop shrinks the newest workers and grows after the last, so a grow may add back an
index a shrink removed: its record is replaced by a new one of the next generation
(its own exit file and shim key; the same log, appended to), once the old process has
ended. While that one still drains, the grow is refused as transient (`BackendError`),
and the loop repeats it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from scheduler.backends import base
from scheduler.backends.local import records, rundir, stopping


def grow(
    book: records.Records,
    request: base.LaunchRequest,
    *,
    launch: Callable[[base.LaunchRequest], None],
    start: Callable[[base.LaunchRequest, records.AttemptRecord], None],
) -> None:
    """`LocalBackend.grow`: record the workers the attempt lacks, then start them with
    `start` (a resumed start: the workers it has started are left alone). An unknown
    attempt has none of them: it is launched."""
    rec = book.attempts.get(records.attempt_key(request.job_id, request.attempt))
    if rec is None:
        launch(request)
        return
    if rec.stop_deadline is not None or rec.killed:
        return  # the attempt is stopping: nothing joins it
    if add_workers(rec, request):
        rec.launched = False  # until they run: a crash leaves it resumable
        book.save(rec)
    if not rec.launched:
        start(request, rec)


def shrink(
    book: records.Records, job_id: str, attempt: int, workers: Sequence[int], grace_s: float
) -> bool:
    """`LocalBackend.shrink`: mark these workers stopping (`Resized`), the rest left
    running; the caller signals them (`stopping.escalate`). True when one was marked."""
    rec = book.attempts.get(records.attempt_key(job_id, attempt))
    if rec is None or rec.killed or rec.stop_deadline is not None:
        return False  # unknown, or stopping whole: its own stop covers these too
    reason = base.StopReason.RESIZED
    return stopping.request_workers(rec, workers, grace_s, reason, time.time())


def add_workers(rec: records.AttemptRecord, request: base.LaunchRequest) -> bool:
    """Record the workers of `request.placements` the attempt does not have (or had and
    a shrink removed); the ones it has are left as they are. True when one was added."""
    log_dir = Path(rec.workers[0].log).parent
    work = Path(rec.preempt_file).parent if request.spec.elastic else None
    at = {w.worker: i for i, w in enumerate(rec.workers)}
    added = False
    for p in request.placements:
        i = at.get(p.worker)
        if i is None:
            rec.workers.append(rundir.worker_record(p, log_dir, work))
            added = True
            continue
        old = rec.workers[i]
        if old.stop_deadline is None:
            continue  # it has this one already (running, ended, or not started yet)
        if records.alive(old) and not Path(old.exit_file).exists():
            raise base.StillStopping(
                f"worker {p.worker} of attempt {rec.key} is still stopping after a shrink"
            )
        rec.workers[i] = rundir.worker_record(p, log_dir, work, old.generation + 1)
        added = True
    rec.workers.sort(key=lambda w: w.worker)
    return added
