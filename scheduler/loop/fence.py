"""The lease fence around the cycle's backend: a replica whose scheduling lease may have
passed to another launches and stops nothing (see `Fenced`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from scheduler import model
from scheduler.backends import base

log = logging.getLogger(__name__)

# A cycle launches and stops only within this part of the lease after it last renewed it
# (client-go's renew deadline is 2/3 of the lease), renewing it on the way once a third
# has passed: a replica that stalls and finds its lease taken writes nothing more to the
# cluster, so it cannot race the one that took over.
RENEW_FRACTION = 2 / 3


class LeaseLapsed(base.BackendError):
    """A launch or stop refused: this replica's lease may have passed to another."""

    transient = True


class Fenced:
    """The cycle's backend: before each write (launch, stop, and each ability's writes:
    a foreign bind or note, an adoption) the lease taken at `taken` (monotonic) is
    renewed once a third of `ttl_s` has passed; once a renewal finds it another's, or
    2/3 of it passed with no renewal, they are refused (`LeaseLapsed`, transient: the
    launch is kept, and finished by whoever leads next)."""

    def __init__(
        self,
        backend: base.ClusterBackend,
        capabilities: base.Capabilities,
        *,
        taken: float,
        ttl_s: float,
        renew: Callable[[], bool],
    ) -> None:
        self._backend, self._renewed, self._ttl, self._renew = backend, taken, ttl_s, renew
        self._lost = False
        self._checking = threading.Lock()  # launches on the backend's threads check too
        foreign, notes, local, resizable, launches = (
            capabilities.foreign,
            capabilities.pending_notes,
            capabilities.local_workers,
            capabilities.resizable,
            capabilities.async_launches,
        )
        self._capabilities = replace(
            capabilities,
            resizable=FencedResizable(self, resizable) if resizable else None,
            foreign=FencedForeign(self, foreign) if foreign else None,
            pending_notes=FencedNotes(self, notes) if notes else None,
            local_workers=FencedLocal(self, local) if local else None,
            async_launches=FencedLaunches(self, launches) if launches else None,
        )

    def check(self, what: str) -> None:
        """Raise `LeaseLapsed` unless this replica still surely holds the lease."""
        with self._checking:
            self._check(what)

    def _check(self, what: str) -> None:
        now = time.monotonic()
        if not self._lost and now - self._renewed > self._ttl / 3:
            try:
                if self._renew():
                    self._renewed = now
                else:
                    self._lost = True
            except Exception as exc:  # the database away: the deadline below decides
                log.warning("could not renew the scheduling lease: %s", exc)
        if self._lost or time.monotonic() >= self._renewed + self._ttl * RENEW_FRACTION:
            raise LeaseLapsed(f"{what} not sent: this replica's scheduling lease has lapsed")

    def capabilities(self) -> base.Capabilities:
        return self._capabilities

    def nodes(self) -> Sequence[model.Node]:
        return self._backend.nodes()

    def workers(self) -> Sequence[base.WorkerStatus]:
        return self._backend.workers()

    def launch(self, request: base.LaunchRequest) -> None:
        self.check("launch")
        self._backend.launch(request)

    def stop(
        self, job_id: str, grace_period_s: float, *, reason: str = base.StopReason.STOPPED
    ) -> None:
        self.check("stop")
        self._backend.stop(job_id, grace_period_s, reason=reason)

    def close(self) -> None:
        self._backend.close()


class FencedLaunches:
    """Launches on the backend's threads: checked when queued and again before their
    writes, which may come after the cycle that queued them."""

    def __init__(self, fence: Fenced, launches: base.AsyncLaunches) -> None:
        self._fence, self._launches = fence, launches

    def launch_async(self, request: base.LaunchRequest, guard: Callable[[str], None]) -> None:
        self._fence.check("launch")

        def fenced(what: str) -> None:
            self._fence.check(what)
            guard(what)

        self._launches.launch_async(request, fenced)

    def settled(self) -> Sequence[tuple[base.LaunchRequest, Exception | None]]:
        return self._launches.settled()


class FencedResizable:
    """An elastic job's workers added or stopped only while this replica surely leads."""

    def __init__(self, fence: Fenced, resizable: base.Resizable) -> None:
        self._fence, self._resizable = fence, resizable

    def grow(self, request: base.LaunchRequest) -> None:
        self._fence.check("grow")
        self._resizable.grow(request)

    def shrink(
        self, job_id: str, attempt: int, workers: Sequence[int], grace_period_s: float
    ) -> None:
        self._fence.check("shrink")
        self._resizable.shrink(job_id, attempt, workers, grace_period_s)


class FencedForeign:
    """A backend's foreign pods, their binds behind the lease check."""

    def __init__(self, fence: Fenced, foreign: base.ForeignWorkloads) -> None:
        self._fence, self._foreign = fence, foreign

    def foreign_requests(self) -> Sequence[model.JobRequest]:
        return self._foreign.foreign_requests()

    def foreign_running(self) -> Sequence[model.RunningJob]:
        return self._foreign.foreign_running()

    def bind_foreign(self, job_id: str, placement: model.WorkerPlacement) -> None:
        self._fence.check("bind")
        self._foreign.bind_foreign(job_id, placement)


class FencedNotes:
    """A foreign pod's status writes (why it waits) behind the lease check."""

    def __init__(self, fence: Fenced, notes: base.PendingNotes) -> None:
        self._fence, self._notes = fence, notes

    def note_pending(self, job_id: str, message: str) -> None:
        self._fence.check("note")
        self._notes.note_pending(job_id, message)


class FencedLocal:
    """Another replica's attempt adopted only while this one surely leads."""

    def __init__(self, fence: Fenced, local: base.LocalWorkers) -> None:
        self._fence, self._local = fence, local

    @property
    def instance(self) -> str:
        return self._local.instance

    @property
    def state_dir(self) -> Path:
        return self._local.state_dir

    def adopt(self, state: str, instance: str, job_id: str, attempt: int) -> bool:
        self._fence.check("adopt")
        return self._local.adopt(state, instance, job_id, attempt)
