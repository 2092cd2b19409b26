"""Adopting the workers another replica's local backend left on this host (issue 25
item 0).

A replica that dies leaves its shims running. The replica that takes over has another
state directory, but each launch recorded where the launching one keeps its state
(`Launching`/`Launched` events: `backend`, `state`), so the new leader reads that
attempt's record (ports, files, processes), fills in the processes a crash left out of
it from the process table (every shim carries its key in its environment), and keeps
the attempt as its own: its workers are then seen, counted, stopped and finished as any
other, and a launch the dead replica did not finish is finished, never begun again.
"""

from __future__ import annotations

import json
from pathlib import Path

from scheduler.backends.local import records


def adopt(own: records.Records, state: str, instance: str, job_id: str, attempt: int) -> bool:
    """Take over `instance`'s attempt from its state directory `state`; False when its
    record cannot be read here (another host, another user, removed)."""
    key = records.attempt_key(job_id, attempt)
    if key in own.attempts:
        return True
    path = records.record_file(Path(state) / "local" / "attempts", job_id, attempt)
    try:
        rec = records.decode(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return False
    shims = records.find_shims(instance)
    for w in rec.workers:
        pid = shims.get(records.shim_key(instance, job_id, attempt, w.worker, w.generation))
        if pid is not None and not records.alive(w):
            w.pid, w.start_ticks = pid, records.start_ticks(pid)
    rec.adopted_from = instance
    own.attempts[key] = rec
    own.save(rec)
    return True
