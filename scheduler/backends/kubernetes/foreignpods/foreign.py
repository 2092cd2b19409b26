"""Foreign pods: pods Shoal did not create that name it as their scheduler.

Lists the pending ones as requests, binds (adopts) them where the loop placed them,
notes why one waits, and reports the adopted ones and those in flight as running.
Whole-GPU bindings run on a pool, one call per pod, none under the backend's lock. A pod
is "in flight" from the loop's decision until the cache shows it bound (or gone):
meanwhile it is not pending and counts as running where it was placed, so no cycle
places it twice or gives its GPU to another pod. What the core does not count (other
resources, the pod count, host ports) keeps a pod off the nodes where it does not fit, and
is checked again at each bind (`nodefit`).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from scheduler.backends import base
from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.client import events
from scheduler.backends.kubernetes.client.api import STRATEGIC_PATCH
from scheduler.backends.kubernetes.foreignpods.draforeign import ForeignClaims
from scheduler.backends.kubernetes.foreignpods.foreigngangs import (
    PREFIX,
    ForeignGang,
    Gangs,
    group_of,
)
from scheduler.backends.kubernetes.foreignpods.nodefit import Fits, NodeFit
from scheduler.backends.kubernetes.pods import objectmeta
from scheduler.backends.kubernetes.pods.handle import Handle
from scheduler.backends.kubernetes.view import podrules
from scheduler.backends.kubernetes.view.status import ForeignPod
from scheduler.model import JobRequest, NodeRules, Requirement, RunningJob, WorkerPlacement
from scheduler.placement import eligible

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class ForeignBindings:
    def __init__(
        self,
        handle: Handle,
        *,
        volumes: podrules.VolumeRules,
        fit: NodeFit,
        closed: threading.Event,
        on_change: Callable[[], None],
        dra: ForeignClaims | None = None,
    ) -> None:
        h = handle
        self.kube, self.config, self.index, self.volumes = h.kube, h.config, h.index, volumes
        self.reservations, self.events, self.binder = h.reservations, h.recorder, h.binder
        self.fit = fit  # other resources and host ports, per node
        self.lock, self.closed = h.lock, closed  # the backend's
        self.mps_replicas, self.on_change = h.mps_replicas, on_change
        self.dra = dra  # its own ResourceClaims (None: DRA is off)
        self.gangs = Gangs(h.kube, nodes=fit.node_cache.get)
        self.last_gangs: dict[str, ForeignGang] = {}  # as `requests` offered them
        self._gang_due: dict[str, list[tuple[ForeignPod, WorkerPlacement]]] = {}
        self.pool = (
            ThreadPoolExecutor(h.config.bind_workers, thread_name_prefix="shoal-bind")
            if h.config.bind_workers > 0
            else None
        )
        # Their "Scheduled" Events go out on threads of their own: a bind never queues
        # behind a best-effort write (4: at ~0.3 s a call on a loaded API server, one
        # thread manages ~3 Events/s against 100 binds/s).
        self.eventer = (
            ThreadPoolExecutor(4, thread_name_prefix="shoal-events") if self.pool else None
        )
        self.flight: dict[str, tuple[ForeignPod, WorkerPlacement]] = {}
        self.failed: dict[str, Exception] = {}  # job id -> its binding's failure
        self.flight_lock = threading.Lock()

    def close(self) -> None:
        for pool in (self.pool, self.eventer):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def pending(self) -> list[ForeignPod]:
        """See `KubernetesBackend.foreign_pods`."""
        allowed = self.config.foreign_namespaces  # where RBAC lets Shoal patch and bind
        with self.flight_lock:
            flying = set(self.flight)
        off_dra = self._off_dra_nodes()
        fits = self.fit.view()
        return [
            self._with_claims(self._with_fit(f, fits), off_dra)
            for key, f in self.index.foreign_pending()
            if (allowed is None or f.namespace in allowed)
            and key not in flying
            and f.uid not in self.binder.bound
        ]

    def requests(self) -> list[JobRequest]:
        """The waiting pods as jobs for the core: one each, and one per gang of a
        PodGroup (`foreigngangs`); the gangs are kept for `bind_foreign`."""
        waiting = self.pending()
        single, gangs = self.gangs.split(waiting, self._placed_members(waiting))
        self.last_gangs = {g.job_id: g for g in gangs}
        return [f.to_job_request() for f in single] + [g.to_job_request() for g in gangs]

    def _placed_members(self, waiting: list[ForeignPod]) -> dict[str, dict[str, int]]:
        """PodGroup -> node -> its members placed there, for the groups of `waiting`:
        those the cache shows placed (`PodIndex.members`), and those bound since that the
        cache does not show yet (in flight, or bound here: node unknown, "")."""
        groups = {group_of(f) for f in waiting} - {""}
        if not groups:
            return {}
        placed = {g: self.index.members(g) for g in groups}
        with self.flight_lock:
            flying = {key: at.node for key, (_, at) in self.flight.items()}
        for key, f in self.index.foreign_pending():
            g = group_of(f)
            if g not in groups or (key not in flying and f.uid not in self.binder.bound):
                continue
            node = flying.get(key, "")
            placed[g][node] = placed[g].get(node, 0) + 1
        return placed

    @staticmethod
    def _with_fit(f: ForeignPod, fits: Fits) -> ForeignPod:
        """`f` kept off the nodes its other resources and host ports do not fit."""
        rules = fits.rules(f.ask)
        return replace(f, rules=eligible.also(f.rules, rules)) if rules is not None else f

    def _with_claims(self, f: ForeignPod, off_dra: NodeRules | None) -> ForeignPod:
        """`f` with what its volume claims and ResourceClaims ask of the placement;
        `off_dra` keeps a pod asking `nvidia.com/gpu` off the DRA nodes."""
        if f.claims:
            f = replace(f, rules=eligible.also(f.rules, self.volumes.rules(f.namespace, f.claims)))
        if not f.dra_claims:
            return replace(f, rules=eligible.also(f.rules, off_dra)) if f.gpu and off_dra else f
        if self.dra is None:
            why = (
                f"uses ResourceClaim(s) {', '.join(f.dra_claims)}: DRA is off in Shoal's "
                "configuration (dra: false), so it cannot bind this pod"
            )
            return replace(f, rules=eligible.also(f.rules, NodeRules(blocked=why)))
        gpus, rules = self.dra.request(f)
        return replace(f, gpu=gpus, rules=eligible.also(f.rules, rules))

    def _off_dra_nodes(self) -> NodeRules | None:
        """A pod asking `nvidia.com/gpu` goes to device-plugin nodes only: on a DRA node
        the name is served by a claim kube-scheduler would make for it, which Shoal
        does not (docs/kubernetes.md, "Device plugin or DRA"). Worked out once a call of
        `pending`, for all its pods. None: no DRA node."""
        dra_nodes = self.dra.claims.dra_nodes() if self.dra is not None else ()
        if not dra_nodes:
            return None
        term = (Requirement("metadata.name", "NotIn", tuple(dra_nodes), field=True),)
        return NodeRules(required=((term,),))

    def bind(self, pod: ForeignPod, placement: WorkerPlacement) -> bool:
        """See `KubernetesBackend.bind`."""
        ann = {
            names.JOB_ID: pod.job_id,
            names.NODE: placement.node,
            names.GPUS: names.gpus_text(placement.gpus),
        }
        if pod.dra_claims and self.dra is not None:
            self.dra.allocate(pod, placement)  # its devices first, as kube-scheduler does
        if not objectmeta.is_fractional(placement):
            # One call: the Binding carries the annotations onto the pod (the API server
            # merges them), so the pod is never annotated and unbound, or the reverse.
            if pod.uid in self.binder.bound:
                return True
            bound = self.kube.bind(pod.namespace, pod.name, placement.node, pod.uid, ann)
            self.binder.bound.add(pod.uid)
            if bound:
                ref = {"metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}}
                why = f"Successfully assigned {pod.namespace}/{pod.name} to {placement.node}"
                if self.eventer is None:
                    self.events.emit(ref, "Scheduled", why)
                elif not self.closed.is_set():
                    self.eventer.submit(self.events.emit, ref, "Scheduled", why)
            return True
        if self.mps_replicas(placement.node):
            # Its container asks no `nvidia.com/gpu` (resources cannot change on a pod),
            # so it could not get the replica the placement counts on.
            raise base.BackendError(
                f"node {placement.node} shares GPUs as MPS replicas: a foreign pod gets a "
                "fraction there only by requesting nvidia.com/gpu: 1 itself"
            )
        patch: Obj = {"metadata": {"annotations": ann}}
        with self.lock:
            if objectmeta.is_fractional(placement):
                ann[names.GPU_FRACTION] = f"{placement.fraction:.4f}"
                ann[names.ENFORCEMENT] = str(base.Enforcement.ADVISORY)
                res = self.reservations.ensure(
                    placement.node, placement.gpus[0], f"{pod.namespace}/{pod.name}"
                )
                patch["metadata"]["labels"] = {names.RESERVATION: res["metadata"]["name"]}
            updated = self.kube.patch("pods", pod.name, patch, pod.namespace)
            return self.binder.bind_if_ready(updated)

    def running(self, gpu_counts: dict[str, int]) -> list[RunningJob]:
        """See `KubernetesBackend.foreign_running`."""
        users = self.index.reservation_users()
        held = self.reservations.holds(users, self.index.share_of, gpu_counts)
        with self.flight_lock:
            unsettled = {key: fp.uid for key, (fp, _) in self.flight.items()}
            running, settled = self.index.adopted(unsettled)
            for key in settled:
                del self.flight[key]
            flying = [
                RunningJob(fp.to_job_request(), (p,))
                for key, (fp, p) in self.flight.items()
                if key not in settled
            ]
        return sorted([*running, *flying, *held], key=lambda r: r.job.id)

    def note_pending(self, job_id: str, message: str) -> None:
        """See `KubernetesBackend.note_pending`; a gang's reason goes on each pod."""
        gang = self.last_gangs.get(job_id)
        if gang is not None:
            for member in gang.pods:
                self.note_pending(member.job_id, message)
            return
        key = self.index.key_of_job(job_id)
        pod = self.index.pending(key) if key is not None else None
        allowed = self.config.foreign_namespaces
        if pod is not None and (allowed is None or pod.namespace in allowed):
            cond = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
            self.kube.patch(
                "pods/status",
                pod.name,
                {"status": {"conditions": [cond]}},
                pod.namespace,
                content_type=STRATEGIC_PATCH,
            )
            obj = {
                "kind": "Pod",
                "apiVersion": "v1",
                "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            }
            self.events.emit(obj, "FailedScheduling", message, events.WARNING, key=message)

    def bind_foreign(self, job_id: str, placement: WorkerPlacement) -> None:
        """See `KubernetesBackend.bind_foreign`; a gang's worker i is its i-th pod."""
        if job_id.startswith(PREFIX):
            self._bind_member(job_id, placement)
            return
        with self.flight_lock:
            failed = self.failed.pop(job_id, None)
        if failed is not None:
            raise failed
        key = self.index.key_of_job(job_id)
        pod = self.index.pending(key) if key is not None else None
        allowed = self.config.foreign_namespaces
        if key is None or pod is None or pod.uid in self.binder.bound:
            return
        if allowed is not None and pod.namespace not in allowed:
            return
        with self.flight_lock:
            if key in self.flight:
                return
        why = self.fit.admit(key, pod, placement.node)
        if why is not None:  # taken by a bind of this cycle: it waits for the next
            self.note_pending(job_id, f"node {placement.node}: {why} (since this cycle began)")
            self.on_change()
            return
        if self.pool is None or objectmeta.is_fractional(placement):
            try:
                self.bind(pod, placement)
            except Exception:
                self.fit.forget(key)
                raise
            return
        with self.flight_lock:
            self.flight[key] = (pod, placement)
        self.pool.submit(self._bind_in_pool, key, pod, placement)

    def _bind_member(self, job_id: str, placement: WorkerPlacement) -> None:
        """A gang's members are bound once all its placements are in, and only if every
        member fits its node beside the others (`nodefit`): whole or not at all."""
        gang = self.last_gangs.get(job_id)
        member = gang.member(placement) if gang is not None else None
        if gang is None or member is None:
            return
        due = self._gang_due.setdefault(job_id, [])
        if placement.worker == 0:  # a new decision: what an interrupted one left goes
            due.clear()
        due.append(member)
        if len(due) < len(gang.pods):
            return
        del self._gang_due[job_id]
        admitted: list[str] = []
        for pod, at in due:
            key = self.index.key_of_job(pod.job_id)
            why = self.fit.admit(key, pod, at.node) if key is not None else None
            if why is not None:
                for k in admitted:
                    self.fit.forget(k)
                self.note_pending(
                    job_id, f"node {at.node}: {why} (pod {pod.name}, beside the gang)"
                )
                self.on_change()
                return
            if key is not None:
                admitted.append(key)
        for pod, at in due:
            self.bind_foreign(pod.job_id, at)

    def _bind_in_pool(self, key: str, pod: ForeignPod, placement: WorkerPlacement) -> None:
        try:
            self.bind(pod, placement)
        except Exception as e:  # the pod waits again; the loop backs off its job
            log.warning("binding %s to %s failed: %s", key, placement.node, e)
            self.fit.forget(key)
            with self.flight_lock:
                self.flight.pop(key, None)
                self.failed[pod.job_id] = e
            self.on_change()

    def forget_failures(self, waiting: set[str]) -> None:
        """Drop the failed bindings of jobs whose pod no longer waits."""
        with self.flight_lock:
            self.failed = {k: v for k, v in self.failed.items() if k in waiting}
