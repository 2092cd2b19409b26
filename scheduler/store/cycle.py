"""What the scheduler loop reads and writes, under one name (`from scheduler.store import
cycle as store`): live jobs as core types (`live`), placements, phases and pending
reasons (`transitions`), events (`events`), queues and nodes (`cluster`) and the
single-scheduler lease (`lease`). Each lives in its own module; this one re-exports them.

The loop is the only writer of placements. Every write checks the job's version
(`expected_version`, from `LiveJob.version`) and raises `errors.VersionConflict` when the
job moved on meanwhile (a user cancelled it, another scheduler wrote first): the loop
then re-reads rather than overwrite. Each function commits its own transaction and
returns the job's new version.
"""

from __future__ import annotations

from scheduler.store.cluster import (
    load_capacity,
    load_inventory,
    load_queues,
    save_capacity,
    save_inventory,
)
from scheduler.store.events import append_event
from scheduler.store.lease import acquire_lease, database_now, lease_holder, release_lease
from scheduler.store.live import LIVE, LiveCache, LiveJob, Unreadable, live_jobs
from scheduler.store.transitions import (
    TRANSITIONS,
    record_placement,
    set_pending_reason,
    set_phase,
)

__all__ = [
    "LIVE",
    "TRANSITIONS",
    "LiveCache",
    "LiveJob",
    "Unreadable",
    "acquire_lease",
    "append_event",
    "database_now",
    "lease_holder",
    "live_jobs",
    "load_capacity",
    "load_inventory",
    "load_queues",
    "record_placement",
    "release_lease",
    "save_capacity",
    "save_inventory",
    "set_pending_reason",
    "set_phase",
]
