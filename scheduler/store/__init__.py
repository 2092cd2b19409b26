"""The store: Shoal's system of record (SQLAlchemy 2.x; SQLite default, PostgreSQL).

Open it with `db.open_database(url) -> Database` (runs the Alembic migrations), then
`with database.session() as session:` and call the keyword-only functions below, each
from the module that holds it (the package re-exports nothing); each commits its own
transaction. No SQL lives outside this package.

API / CRD controller (`queues`, `submission`, `jobs`, `rows`, `events`):
    create_queue(*, session, spec: QueueSpec, now=None) -> QueueRow
    list_queues(*, session, names=None) -> list[QueueRow]
    get_queue(*, session, name) -> QueueRow
    update_queue(*, session, spec: QueueSpec, expected_version=None, now=None) -> QueueRow
    delete_queue(*, session, name) -> None          # Conflict: children or live jobs
    submit_job(*, session, spec: JobSpec, submitter, idempotency_key=None, now=None)
        -> tuple[JobRow, bool]                      # (job, created)
    list_jobs(*, session, queues=None, queue=None, phase=None, submitter=None,
              limit=50, cursor=None) -> JobPage     # newest first, .next_cursor
    get_job(*, session, job_id, queues=None) -> JobRow
    cancel_job(*, session, job_id, by, queues=None, now=None) -> JobRow
    list_events(*, session, job_id, queues=None) -> list[JobEventRow]
    count_by_phase(*, session, queues=None) -> dict[str, int]

Scheduler loop (`live`, `transitions`, `events`, `cluster`, `lease`), every write
checked against `expected_version`; the loop itself writes through `port.LiveStore`
(`port.opened(database)`: the port on one session; `batches.write`: many jobs' changes
at once):
    load_queues(*, session) -> tuple[core.Queue, ...]
    live_jobs(*, session, cache=None) -> list[LiveJob]  # .request, .running(), .version, .spec
    LiveCache()                                     # a reader's cache: re-read only changed rows
    record_placement(*, session, job_id, expected_version, placements, attempt, now=None)
        -> int                                      # Pending -> Scheduled, before launch
    set_phase(*, session, job_id, expected_version, phase: Phase, reason="", message="",
              count_restart=False, now=None) -> int
    set_pending_reason(*, session, job_id, reason: core.PendingReason,
                       expected_version=None) -> int
    append_event(*, session, job_id, kind, reason="", message="", data=None, now=None)
    save_inventory(*, session, nodes: Sequence[core.Node], now=None)
    load_inventory(*, session) -> tuple[core.Node, ...]
    save_capacity(*, session, nodes: Sequence[core.Node], now=None)  # nodes as if empty
    load_capacity(*, session) -> tuple[core.Node, ...]               # (admission)
    acquire_lease(*, session, holder, ttl_s) -> bool   # on the database's clock
    lease_holder(*, session) -> str | None
    database_now(*, session) -> datetime
    release_lease(*, session, holder) -> None

Errors (`errors`): NotFound, Conflict, VersionConflict(Conflict), InvalidTransition
(Conflict), IdempotencyMismatch, Invalid; each has `.message` and `.loc`.
"""
