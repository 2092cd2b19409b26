"""Which TrainingJobs' jobs changed in the store since the last look: what lets the CR
watcher carry a job's progress (Pending -> Scheduled -> Running -> Succeeded) onto its
TrainingJob's status within a poll interval, instead of at the next relist.

One indexed query a poll (`ix_jobs_origin`): the jobs submitted as TrainingJobs in the
watched namespaces that are live, or finished within the last `FINISHED_WINDOW_S` (so a
job that started and ended between two polls is still seen once). Each row is reduced to
a fingerprint of what the status shows of it; a row whose fingerprint differs from the
last poll's, or that is new, is reported. The pending reason's text is left out of the
fingerprint: a cycle rewrites it whenever the free room it names moves, and writing
every waiting TrainingJob's status each second for that is what the relist is for. A
change of its code (why the job waits) is in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from scheduler.spec import TRAININGJOB
from scheduler.store import crstatus, schema
from scheduler.store.db import Session

FINISHED_WINDOW_S = 120.0  # > any poll interval plus the clock skew between replicas

Fingerprint = tuple[object, ...]


@dataclass(frozen=True, slots=True)
class Changed:
    """A job whose status moved: its id and the TrainingJob it was submitted as."""

    job_id: str
    namespace: str
    name: str
    uid: str  # "" when the CR was read without one (matched by name alone)


@dataclass
class StatusFollower:
    namespaces: tuple[str, ...]
    _seen: dict[str, Fingerprint] | None = field(default=None, init=False)

    def changed(self, session: Session, now: datetime | None = None) -> list[Changed]:
        """The jobs whose fingerprint moved since the previous call. The first call only
        takes the baseline (the watcher's list that follows reconciles everything)."""
        cutoff = (now or schema.utcnow()) - timedelta(seconds=FINISHED_WINDOW_S)
        rows = crstatus.followed_jobs(
            session=session, kind=TRAININGJOB, namespaces=self.namespaces, finished_since=cutoff
        )
        now_seen = {row.job_id: row.fingerprint for row in rows}
        before, self._seen = self._seen, now_seen
        if before is None:
            return []
        return [
            Changed(row.job_id, row.namespace, row.name or "", row.uid or "")
            for row in rows
            if before.get(row.job_id) != now_seen[row.job_id]
        ]

    def forget(self, job_id: str) -> None:
        """Report `job_id` again at the next call (its status write failed)."""
        if self._seen is not None:
            self._seen.pop(job_id, None)
