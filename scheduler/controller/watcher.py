"""The CR watcher: the I/O half of the TrainingJob/Queue controller.

It lists and watches `trainingjobs` and `queues` (group shoal.dev) with the official
client, hands each object to the pure `scheduler.controller.reconcile` functions, carries
the decision out on the store with `scheduler.controller.apply`, and merge-patches the CR's
status subresource. It runs in the leading replica only: `leader_task` is what the
kubernetes runtime (`scheduler.backends.kubernetes.runtime`) starts on gaining the Lease,
handed to it by `shoal serve`, so the backend never imports the controller or the store.

A deleted TrainingJob needs no finalizer: the DELETED event carries the last object, which
is reconciled as if it had a deletionTimestamp (the store job is cancelled), and the
worker pods go with it through their owner references. A TrainingJob deleted while no
watcher ran (no leader, a restart) sends no event: after every full list, live store jobs
submitted from a TrainingJob in that namespace that the list no longer holds are
cancelled (`cancel_missing`).

TrainingJobs are watched in each namespace Shoal is given (the jobs namespace, then the
chart's teamNamespaces), one watch each: a namespace list, not a cluster-wide watch, so
two releases on one cluster never fight over a TrainingJob's status, and a Role per
namespace is all the RBAC it takes.

A job's progress in the store (Scheduled, Running, Succeeded) sends no event either: a
third thread polls the store every `follow_s` (`scheduler.controller.follow`) for the
TrainingJobs whose jobs changed, reads each and reconciles it, so status follows within
about a second rather than at the next relist (`resync_s`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, cast

import kubernetes

from scheduler import model
from scheduler.controller import apply as applying
from scheduler.controller import crdgen, follow, reconcile
from scheduler.core import workingset
from scheduler.loop import snapshot as snapshots
from scheduler.spec import TRAININGJOB
from scheduler.spec.allowed import Allowances
from scheduler.store import crstatus, errors, jobs, queues
from scheduler.store.db import Session
from scheduler.store.port import SqlLiveStore
from scheduler.store.rows import get_job

log = logging.getLogger("shoal.controller")
SessionFactory = Callable[[], AbstractContextManager[Session]]
QUEUE_RESYNC_S = 30


def _without_times(status: dict[str, Any]) -> dict[str, Any]:
    conds = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions", [])
    ]
    return {**status, "conditions": conds}


def status_patch(old: dict[str, Any], new: dict[str, Any], now: str) -> dict[str, Any] | None:
    """The status to write, or None when nothing changed (our own patches come back as
    MODIFIED events; writing again would loop). A condition keeps its
    lastTransitionTime while its status stays the same, and carries the status's
    observedGeneration (metav1.Condition's fields)."""
    # A null in a merge patch deletes the key: comparing with it kept would never settle.
    merged = {**old, **{k: v for k, v in new.items() if v is not None}}
    generation = merged.get("observedGeneration")
    if generation is not None:  # metav1.Condition: the generation each one was set from
        merged["conditions"] = [
            {**c, "observedGeneration": generation} for c in merged.get("conditions", [])
        ]
    if _without_times(merged) == _without_times(old):
        return None
    before = {c.get("type"): c for c in old.get("conditions", [])}
    for cond in merged.get("conditions", []):
        prev = before.get(cond["type"])
        if prev is not None and prev.get("status") == cond["status"]:
            cond["lastTransitionTime"] = prev.get("lastTransitionTime", now)
        else:
            cond["lastTransitionTime"] = now
    return merged


def fair_shares(session: Session) -> dict[str, float]:
    """Every queue's fair share in GPUs now: the core's own computation
    (`fairshare.compute`) on the snapshot the loop would build from the store, as the
    dashboard's `api.queuestats` computes it, so `kubectl get queues` and the dashboard
    show the number the scheduler orders queues by."""
    snap = snapshots.from_store(SqlLiveStore(session), config=model.Config(), now=time.time())
    shares = workingset.with_fair_shares(snap).shares
    return {name: round(s.total.share, 4) for name, s in shares.items()}


class CrWatcher:
    """Reconciles every TrainingJob and Queue on each event and on every relist."""

    def __init__(
        self,
        api_client: Any,
        sessions: SessionFactory,
        namespaces: tuple[str, ...],
        resync_s: int = 300,
        follow_s: float = 1.0,
        chart_limits: Allowances | None = None,
    ) -> None:
        self.api = kubernetes.client.CustomObjectsApi(api_client)
        self.sessions, self.namespaces = sessions, namespaces
        self.chart_limits = chart_limits  # admission.allowed: TrainingJobs meet the REST rules
        # Each watch ends after resync_s and the relist reconciles every CR again (the
        # pending reasons' text, anything the follower missed); the follower carries the
        # store's progress (Running, Succeeded) onto CR status every follow_s.
        self.resync_s, self.follow_s = resync_s, follow_s
        self.follower = follow.StatusFollower(namespaces)
        self._one_at_a_time = threading.Lock()  # the watch and the follower threads

    # --- one object ---------------------------------------------------------------
    def trainingjob(
        self, cr: dict[str, Any], deleted: bool = False, job_id: str | None = None
    ) -> None:
        with self._one_at_a_time:
            self._trainingjob(cr, deleted, job_id)

    def _trainingjob(self, cr: dict[str, Any], deleted: bool, job_id: str | None) -> None:
        if deleted:
            cr = {**cr, "metadata": {**cr["metadata"], "deletionTimestamp": "deleted"}}
        with self.sessions() as session:
            job_id = (cr.get("status") or {}).get("jobId") or job_id
            existing = None
            if job_id:
                try:
                    existing = get_job(session=session, job_id=job_id)
                except errors.NotFound:
                    existing = None
            decision = reconcile.reconcile_trainingjob(cr, existing)
            status = applying.apply(session, decision, self.chart_limits)
            if existing is not None and existing.resized_at is not None and status:
                status["resizes"] = crstatus.resizes(session=session, job_id=existing.id)
        if not deleted and status:
            self._patch_status("trainingjobs", cr, status)

    def queue(self, cr: dict[str, Any], deleted: bool = False) -> None:
        if deleted:
            cr = {**cr, "metadata": {**cr["metadata"], "deletionTimestamp": "deleted"}}
        with self.sessions() as session:
            try:
                row = queues.get_queue(session=session, name=cr["metadata"]["name"])
                existing = queues.spec_of(row)
            except errors.NotFound:
                existing = None
            status = applying.apply(session, reconcile.reconcile_queue(cr, existing))
            valid = all(c.get("status") == "True" for c in status.get("conditions", []))
            if not deleted and valid:  # the Allocated/Pending columns, fresh each relist
                status.update(applying.queue_usage(session, cr["metadata"]["name"]))
                share = fair_shares(session).get(cr["metadata"]["name"])
                if share is not None:
                    status["fairShare"] = share
        if not deleted and status:
            self._patch_status("queues", cr, status)

    def _patch_status(self, plural: str, cr: dict[str, Any], status: dict[str, Any]) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = status_patch(cr.get("status") or {}, status, now)
        if patch is None:
            return
        body = {"status": patch}
        name = cr["metadata"]["name"]
        if plural == "queues":
            self.api.patch_cluster_custom_object_status(
                crdgen.GROUP, crdgen.VERSION, plural, name, body
            )
        else:
            self.api.patch_namespaced_custom_object_status(
                crdgen.GROUP, crdgen.VERSION, cr["metadata"]["namespace"], plural, name, body
            )

    def cancel_missing(self, items: list[dict[str, Any]], namespace: str) -> list[str]:
        """Cancel live store jobs whose TrainingJob (in `namespace`) is not in `items`,
        its full list: it was deleted while no watcher saw the DELETED event. Returns the
        cancelled job ids."""
        uids, names = set(), set()
        for cr in items:
            meta = cr.get("metadata") or {}
            uids.add(str(meta.get("uid") or ""))
            names.add(str(meta.get("name") or ""))
        out = []
        with self.sessions() as session:
            gone = [
                job_id
                for job_id, origin in jobs.live_with_origin(
                    session=session, kind=TRAININGJOB, namespaces=(namespace,)
                )
                # A CR read without a uid is known by its name.
                if (origin.uid not in uids if origin.uid else origin.name not in names)
            ]
            for job_id in gone:
                try:
                    jobs.cancel_job(session=session, job_id=job_id, by="crd:deleted")
                    out.append(job_id)
                    log.info("job %s: its TrainingJob is gone; cancelled", job_id)
                except (errors.Conflict, errors.NotFound):
                    session.rollback()
        return out

    # --- the loops --------------------------------------------------------------------
    def _list(self, plural: str, namespace: str | None = None, **kw: Any) -> Any:
        if namespace is None:  # queues are cluster-scoped
            return self.api.list_cluster_custom_object(crdgen.GROUP, crdgen.VERSION, plural, **kw)
        return self.api.list_namespaced_custom_object(
            crdgen.GROUP, crdgen.VERSION, namespace, plural, **kw
        )

    def _events(
        self, plural: str, resource_version: str, namespace: str | None
    ) -> Iterator[dict[str, Any]]:
        watch = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
        # Queues relist often (few objects): each relist refreshes their usage columns.
        timeout = min(self.resync_s, QUEUE_RESYNC_S) if plural == "queues" else self.resync_s
        yield from watch.stream(  # type: ignore[no-untyped-call]
            self._list,
            plural,
            namespace,
            resource_version=resource_version,
            timeout_seconds=timeout,
        )

    def run(self, plural: str, stop: threading.Event, namespace: str | None = None) -> None:
        """List (reconciling everything), then watch; relist on any error or 410.
        TrainingJobs: those of `namespace`."""
        handle = self.queue if plural == "queues" else self.trainingjob
        while not stop.is_set():
            try:
                listing = self._list(plural, namespace)
                for item in listing.get("items", []):
                    handle(item)
                if namespace is not None:
                    self.cancel_missing(list(listing.get("items", [])), namespace)
                version = listing["metadata"]["resourceVersion"]
                for event in self._events(plural, version, namespace):
                    if stop.is_set():
                        return
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        obj = event["object"]
                        # Our own status patches come back as MODIFIED: reconcile is
                        # idempotent and status_patch writes only real changes.
                        handle(obj, deleted=event["type"] == "DELETED")
            except Exception:  # the API server went away, 410 Gone, a store hiccup
                log.exception("watching %s (%s) failed; relisting in 5 s", plural, namespace)
                stop.wait(5.0)

    def follow_once(self) -> list[str]:
        """Reconcile the TrainingJobs whose jobs changed in the store since the last call
        (status_patch writes only what moved). Returns their job ids."""
        with self.sessions() as session:
            changed = self.follower.changed(session)
        done = []
        for c in changed:
            try:
                cr = cast(
                    dict[str, Any],
                    self.api.get_namespaced_custom_object(
                        crdgen.GROUP, crdgen.VERSION, c.namespace, "trainingjobs", c.name
                    ),
                )
                if c.uid and (cr.get("metadata") or {}).get("uid") != c.uid:
                    continue  # a TrainingJob re-created under the same name: not this job's
                self.trainingjob(cr, job_id=c.job_id)
                done.append(c.job_id)
            except Exception as e:
                if getattr(e, "status", None) == 404:
                    continue  # deleted: its DELETED event cancels the job
                self.follower.forget(c.job_id)  # reported again at the next poll
                log.exception("TrainingJob %s: status not followed; retried", c.name)
        return done

    def follow(self, stop: threading.Event) -> None:
        """`follow_once` every `follow_s` until `stop`."""
        while not stop.wait(self.follow_s):
            try:
                self.follow_once()
            except Exception:  # the database or the API server away: next poll
                log.exception("following job status failed")

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        try:  # the baseline before the list, so nothing between the two is missed
            with self.sessions() as session:
                self.follower.changed(session)
        except Exception:
            log.exception("following job status: no baseline; the first poll takes it")
        threads = [
            threading.Thread(target=self.run, args=("queues", stop), name="cr-queues", daemon=True)
        ]
        threads.extend(
            threading.Thread(
                target=self.run, args=("trainingjobs", stop, ns), name=f"cr-{ns}", daemon=True
            )
            for ns in self.namespaces
        )
        if self.follow_s > 0:
            threads.append(
                threading.Thread(target=self.follow, args=(stop,), name="cr-status", daemon=True)
            )
        for t in threads:
            t.start()
        return threads


def leader_task(
    sessions: SessionFactory,
    *,
    resync_s: int = 300,
    follow_s: float = 1.0,
    chart_limits: Allowances | None = None,
) -> Callable[[Any, tuple[str, ...], threading.Event], list[threading.Thread]]:
    """What the kubernetes runtime runs while it leads: a `CrWatcher` on its API client
    and the namespaces it runs jobs in, stopped by the event it is given."""

    def start(
        api_client: Any, namespaces: tuple[str, ...], stop: threading.Event
    ) -> list[threading.Thread]:
        watcher = CrWatcher(
            api_client,
            sessions,
            namespaces,
            resync_s=resync_s,
            follow_s=follow_s,
            chart_limits=chart_limits,
        )
        return watcher.start(stop)

    return start
