"""Leader election through a coordination.k8s.io/v1 Lease, as client-go does it.

Every replica runs a `LeaderElector`; the one whose identity is the Lease's
`holderIdentity` leads, and renews `renewTime` every `renew_every_s`. Updates carry the
resourceVersion they read, so of two replicas racing for the Lease one gets 409 Conflict
and loses. A follower takes over when the record it last saw has not changed for
`lease_duration_s` of its own (monotonic) clock, so clock skew between nodes does not
matter. A leader that cannot renew within the renew deadline (2/3 of the duration, as
client-go's defaults 15 s / 10 s) stops acting by itself, so that whatever it writes lands
before a follower can take over; `leader_until()` gives that deadline to callers. On a
clean shutdown it releases the Lease so that a follower need not wait.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from scheduler.backends.kubernetes.client.api import Kube
from scheduler.backends.kubernetes.client.apierrors import ApiError

log = logging.getLogger(__name__)
Obj = dict[str, Any]


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        identity: str,
        *,
        name: str = "shoal-scheduler",
        lease_duration_s: int = 15,
        renew_every_s: float = 5.0,
        renew_deadline_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.identity, self.lease_duration_s = identity, lease_duration_s
        self.renew_every_s, self.clock = renew_every_s, clock
        self.renew_deadline_s = (
            renew_deadline_s if renew_deadline_s is not None else lease_duration_s * 2 / 3
        )
        self._observed: tuple[str, str, str] | None = None  # (holder, renewTime, rv)
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def is_leader(self) -> bool:
        """True while this replica holds a Lease it renewed within the renew deadline."""
        until = self.leader_until()
        return until is not None and self.clock() < until

    def leader_until(self) -> float | None:
        """The `clock()` time at which this replica stops acting unless it renews first."""
        if self._renewed_at is None:
            return None
        return self._renewed_at + self.renew_deadline_s

    def _spec(self, acquire_time: str | None, transitions: int) -> Obj:
        now = _micro_now()
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_duration_s,
            "acquireTime": acquire_time or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def try_acquire_or_renew(self, _retry: bool = True) -> bool:
        """One attempt; True when this replica holds the Lease afterwards."""
        try:
            lease = self.kube.get("leases", self.name, self.namespace)
            if lease is None:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(None, 0),
                }
                self.kube.create("leases", body, self.namespace)
                return self._won()
            spec, rv = lease.get("spec") or {}, lease["metadata"]["resourceVersion"]
            holder = spec.get("holderIdentity") or ""
            record = (holder, str(spec.get("renewTime", "")), rv)
            if record != self._observed:
                self._observed, self._observed_at = record, self.clock()
            duration = int(spec.get("leaseDurationSeconds") or self.lease_duration_s)
            mine = holder == self.identity
            if holder and not mine and self.clock() - self._observed_at < duration:
                return self._lost()
            transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
            lease["spec"] = self._spec(spec.get("acquireTime") if mine else None, transitions)
            self.kube.replace("leases", self.name, lease, self.namespace)  # rv-checked
            return self._won()
        except ApiError as e:
            if e.status == 409 and _retry:
                # A stale read, not proof that another replica leads: read again and decide
                # on what the Lease says now (once, so two racers cannot loop).
                return self.try_acquire_or_renew(_retry=False)
            if e.status != 409:
                log.warning("lease %s: %s", self.name, e)
            return self._lost(keep=e.status != 409)

    def _won(self) -> bool:
        if not self.is_leader:
            log.info("%s now leads (lease %s/%s)", self.identity, self.namespace, self.name)
        self._renewed_at = self.clock()
        return True

    def _lost(self, keep: bool = False) -> bool:
        # An API error is not proof of losing: keep leading until the lease would expire.
        if not keep:
            self._renewed_at = None
        return self.is_leader

    def release(self) -> None:
        """Give the Lease up now (on shutdown), if this replica holds it."""
        self._stop.set()
        if self._renewed_at is None:
            return
        self._renewed_at = None
        try:
            lease = self.kube.get("leases", self.name, self.namespace)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                spec = {k: v for k, v in lease["spec"].items() if k != "holderIdentity"}
                lease["spec"] = {**spec, "leaseDurationSeconds": 1, "renewTime": _micro_now()}
                self.kube.replace("leases", self.name, lease, self.namespace)
        except ApiError as e:
            log.info("could not release lease %s: %s", self.name, e)

    def start(self) -> None:
        """Run the acquire/renew cycle in a background thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="shoal-leader", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.try_acquire_or_renew()
            # Followers poll as often as the leader renews, so takeover after expiry
            # comes within one renew period.
            self._stop.wait(self.renew_every_s)

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        if release:
            self.release()
