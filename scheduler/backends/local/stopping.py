"""The local backend's stop side: telling an attempt's workers why they stop, SIGTERM, and
SIGKILL once the grace period is over. `backend.LocalBackend` calls these under its lock;
they change the records in memory and leave saving them to the caller.

`request` writes the reason (`base.StopReason`) to the attempt's SHOAL_STOP_FILE and, for
a preemption only, `SHOAL_PREEMPTED=1` to its SHOAL_PREEMPT_FILE, before any signal, so a
worker woken by SIGTERM finds them. A repeated stop keeps the first one's reason and
deadline, as a pod that is already terminating keeps its grace period. `request_workers`
is the same for some workers of an attempt (an elastic job's shrink: `Resized`), each
with its own stop file, deadline and kill. `escalate` sends the signals; it never blocks
(the watcher thread and `workers()` call it again).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterable

from scheduler.backends import base
from scheduler.backends.local import processes, records, rundir

log = logging.getLogger("shoal.local")


def request(
    attempts: Iterable[records.AttemptRecord],
    job_id: str,
    grace_period_s: float,
    reason: str,
    now: float,
) -> None:
    """Mark every live attempt of `job_id` as stopping, with its reason and deadline."""
    for rec in attempts:
        if rec.job_id != job_id or rec.killed:
            continue
        if not any(records.alive(w) for w in rec.workers):
            rec.killed = True
            continue
        if rec.stop_deadline is not None:
            continue  # a repeat (the orphan sweep): the grace period is the worker's to use
        rec.stop_reason = str(reason)
        # A worker's own stop file (an elastic attempt's) unless a shrink already wrote it.
        own = [w.stop_file for w in rec.workers if w.stop_file and w.stop_deadline is None]
        try:
            for path in [rec.stop_file, *own]:
                if path:
                    rundir.write_for_worker(path, f"{reason}\n")
            if reason == base.StopReason.PREEMPTED:
                rundir.write_for_worker(rec.preempt_file, "SHOAL_PREEMPTED=1\n")
        except OSError as e:
            # The directory is the worker's own: it may have broken it. Stop it all the same.
            log.warning("job %s: cannot write its stop files: %s", rec.key, e)
        rec.stop_deadline = now + max(0.0, grace_period_s)


def request_workers(
    rec: records.AttemptRecord,
    workers: Iterable[int],
    grace_period_s: float,
    reason: str,
    now: float,
) -> bool:
    """Mark these workers of the attempt as stopping (a shrink), the others untouched:
    each one's own stop file (the attempt's where it has none) says why. A worker
    stopping already keeps its first reason and deadline. True when a record changed."""
    chosen = set(workers)
    changed = False
    for w in rec.workers:
        if w.worker not in chosen or w.stop_deadline is not None:
            continue
        w.stop_reason = str(reason)
        w.stop_deadline = now + max(0.0, grace_period_s)
        changed = True
        if not records.alive(w):
            w.killed = True  # ended already (or never started): nothing to signal
            continue
        try:
            rundir.write_for_worker(w.stop_file or rec.stop_file, f"{reason}\n")
        except OSError as e:
            log.warning("job %s: cannot write worker %d's stop file: %s", rec.key, w.worker, e)
    return changed


def escalate(
    attempts: Iterable[records.AttemptRecord],
    launches: records.Records,
    now: float,
) -> bool:
    """Tell stopping workers (SIGTERM), then SIGKILL them once the grace period ends.
    A shim not yet in the ledger has no handler yet; it is told on a later call.
    True when a record changed."""
    changed = False
    ledger: dict[str, int] | None = None
    attempts = list(attempts)
    for rec in attempts:
        whole = rec.stop_deadline is not None and not rec.killed
        for w in rec.workers:
            if not (whole or (w.stop_deadline is not None and not w.killed)):
                continue
            if w.told or w.pid is None or not records.alive(w):
                continue
            if ledger is None:
                ledger = launches.launches()
            # An adopted attempt's shims are long past installing their handler.
            key = launches.shim_key(rec.job_id, rec.attempt, w.worker, w.generation)
            if rec.adopted_from or key in ledger:
                processes.send(w.pid, signal.SIGTERM, group=False)
                w.told = changed = True
    for rec in attempts:
        if rec.stop_deadline is not None and not rec.killed and now >= rec.stop_deadline:
            for w in rec.workers:
                if records.alive(w) and w.pid is not None:
                    processes.send(w.pid, signal.SIGKILL, group=True)
            rec.killed = changed = True
        for w in rec.workers:  # the workers a shrink removed, one by one
            if w.stop_deadline is not None and not w.killed and now >= w.stop_deadline:
                if records.alive(w) and w.pid is not None:
                    processes.send(w.pid, signal.SIGKILL, group=True)
                w.killed = changed = True
    return changed
