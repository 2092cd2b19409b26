"""The Kubernetes cluster backend: Shoal's `ClusterBackend` on a real cluster.

The scheduler loop calls it (only while its replica leads). Reads come from
list-and-watch caches of Nodes and Pods; writes go to the API server with bounded
retries and are idempotent: objects have deterministic names, 409 AlreadyExists on an
object Shoal owns counts as success, and a pod already bound is never bound again. A
background reconcile step binds fractional workers once their GPU's UUID is known,
finishes launches a crash interrupted, reports failures as Events, releases unused GPU
reservations and deletes finished jobs' objects after `finished_ttl_s`.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from scheduler.backends import base
from scheduler.backends.kubernetes import (
    events,
    inventory,
    manifests,
    names,
    podindex,
    podrules,
    shares,
    status,
)
from scheduler.backends.kubernetes.api import STRATEGIC_PATCH, ApiError, Kube, Unavailable
from scheduler.backends.kubernetes.config import KubeConfig, api_client
from scheduler.backends.kubernetes.reflector import Reflector
from scheduler.model import JobRequest, Node, RunningJob, WorkerPlacement
from scheduler.placement import eligible
from scheduler.spec import Framework

log = logging.getLogger(__name__)
Obj = dict[str, Any]


def graceful(grace_period_s: float) -> int:
    """The `gracePeriodSeconds` of a delete: whole seconds, rounded up, at least 1. Never
    0, which is a force delete: the API server forgets the pod at once while its
    containers may still run and hold their GPUs on the node."""
    return max(1, math.ceil(grace_period_s))


class KubernetesBackend:
    def __init__(
        self,
        config: KubeConfig | None = None,
        *,
        client: Any = None,
        start: bool = True,
        is_leader: Callable[[], bool] = lambda: True,
        sync_timeout_s: float = 30.0,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.config = config or KubeConfig()
        self.kube = Kube(client if client is not None else api_client(self.config), self.config)
        # `on_change` (the loop's wake) runs when a foreign pod starts waiting or a
        # binding fails: the loop need not sleep out its interval with work at hand.
        self.on_change = on_change or (lambda: None)
        self.index = podindex.PodIndex(self.config.scheduler_name, self.on_change)
        self.node_cache = Reflector(self.kube, "nodes")
        self.pod_cache = Reflector(self.kube, "pods", listener=self.index)
        self.events = events.Recorder(self.kube.fork(), self.config.event_component)
        self.reservations = shares.Reservations(self.kube, self.config, self.events)
        self.volumes = podrules.VolumeRules(self.kube)  # foreign pods' claims, as node rules
        self.is_leader = is_leader
        self.last_error: str | None = None
        self._lock = threading.RLock()  # launch/stop/reconcile never interleave
        self._closed = threading.Event()
        self._reported: set[str] = set()  # pod uids whose failure has an Event
        self._bound: set[str] = set()  # pod uids this process bound (the cache may lag)
        self._finished_since: dict[str, float] = {}
        self._stopped: set[str] = set()  # jobs stop() has deleted (see stop)
        self._refused: dict[str, str] = {}  # pod uid -> why its binding was refused
        # Foreign pods' bindings run on a pool, one call per pod, none under `_lock`.
        # A pod is "in flight" from the loop's decision until the cache shows it bound
        # (or gone): meanwhile it is not pending and counts as running where it was
        # placed, so no cycle places it twice or gives its GPU to another pod.
        self._binder = (
            ThreadPoolExecutor(self.config.bind_workers, thread_name_prefix="shoal-bind")
            if self.config.bind_workers > 0
            else None
        )
        # Their "Scheduled" Events go out on threads of their own: a bind never queues
        # behind a best-effort write (4: at ~0.3 s a call on a loaded API server, one
        # thread manages ~3 Events/s against 100 binds/s).
        self._eventer = (
            ThreadPoolExecutor(4, thread_name_prefix="shoal-events") if self._binder else None
        )
        self._flight: dict[str, tuple[status.ForeignPod, WorkerPlacement]] = {}
        self._bind_failed: dict[str, Exception] = {}  # job id -> its binding's failure
        self._flight_lock = threading.Lock()
        # node name -> (Node object, foreign usage, what nodes() made of them)
        self._node_memo: dict[str, tuple[Obj, tuple[int, int, int], Node | None]] = {}
        self._capacity = inventory.Capacity()
        self._thread: threading.Thread | None = None
        if start:
            self.start(sync_timeout_s)

    # ---- lifecycle ----

    def start(self, sync_timeout_s: float = 30.0) -> None:
        """Start the caches (and the reconcile thread); wait for their first list."""
        self.node_cache.start()
        self.pod_cache.start()
        for cache in (self.node_cache, self.pod_cache):
            if not cache.wait_synced(sync_timeout_s):
                raise Unavailable(
                    503, "Unavailable", f"could not list {cache.resource}: {cache.last_error}"
                )
        if self._thread is None and self.config.reconcile_interval_s > 0:
            self._thread = threading.Thread(
                target=self._run, name="shoal-kube-reconcile", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self.kube.closed.set()
        self.node_cache.stop()
        self.pod_cache.stop()
        for pool in (self._binder, self._eventer):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def errors(self) -> dict[str, str]:
        """What is failing now (empty when healthy): caches and the reconcile step."""
        out = {c.resource: c.last_error for c in (self.node_cache, self.pod_cache)}
        out["reconcile"] = self.last_error
        return {k: v for k, v in out.items() if v}

    # ---- ClusterBackend ----

    def capabilities(self) -> base.Capabilities:
        return base.Capabilities(
            foreign=self, pending_notes=self, capacity=self, excluded_nodes=self
        )

    def nodes(self) -> list[Node]:
        """`inventory.schedulable_nodes`, from the index's foreign totals; a node whose
        object and foreign usage are unchanged since the last call is not worked out
        again (the cache replaces an object on every change, never mutates it)."""
        used = self.index.usage()
        memo: dict[str, tuple[Obj, tuple[int, int, int], Node | None]] = {}
        for n in self.node_cache.items():
            name = n["metadata"]["name"]
            u = used.get(name, (0, 0, 0))
            hit = self._node_memo.get(name)
            if hit is not None and hit[0] is n and hit[1] == u:
                memo[name] = hit
                continue
            ok = inventory.unschedulable_reason(n) is None
            memo[name] = (n, u, inventory.to_node(n, u) if ok else None)
        self._node_memo = memo
        # A reservation found no GPU there: no fractions, whole GPUs still (issue 24).
        no_gpu = self.reservations.excluded()
        out = [m[2] for m in memo.values() if m[2] is not None]
        out = [replace(n, no_sharing=no_gpu[n.name]) if n.name in no_gpu else n for n in out]
        return sorted(out, key=lambda n: n.name)

    def capacity(self) -> list[Node]:
        """Every node as if empty, cordoned and NotReady ones too (`inventory.Capacity`)."""
        return self._capacity(self.node_cache.items())

    def _mps_replicas(self, node: str) -> int:
        """N when `node`'s device plugin shares each GPU as N MPS replicas, else 0."""
        hit = self._node_memo.get(node)  # the node as the last `nodes()` (the cycle's) saw it
        if hit is None:
            obj = next((n for n in self.node_cache.items() if n["metadata"]["name"] == node), None)
            return inventory.mps_replicas(obj) if obj is not None else 0
        return inventory.mps_replicas(hit[0])

    def excluded_nodes(self) -> dict[str, str]:
        """node -> why Shoal does not offer it (cordoned, a taint, NotReady, shared
        devices it cannot count), or why it offers no fractions there (a reservation's
        GPU did not reach its container; its whole GPUs are still offered)."""
        out = {}
        no_gpu = self.reservations.excluded()
        for n in self.node_cache.items():
            name = n["metadata"]["name"]
            reason = inventory.unschedulable_reason(n) or no_gpu.get(name)
            if reason:
                out[name] = reason
        return out

    def launch(self, request: base.LaunchRequest) -> None:
        ns, req = self.config.namespace, request
        stem = names.job_base(req.job_id, req.spec.name)
        hosts = [
            f"{names.pod_name(stem, req.attempt, p.worker)}.{stem}.{ns}.svc"
            for p in sorted(req.placements, key=lambda p: p.worker)
        ]
        with self._lock:
            self._stopped.discard(req.job_id)
            self._ensure("services", manifests.service(req, stem, ns), req.job_id)
            if req.spec.framework is Framework.MPI:
                self._ensure("configmaps", manifests.hostfile(req, stem, ns, hosts), req.job_id)
            replica = {p.worker: self._mps_replicas(p.node) > 0 for p in req.placements}
            for p in req.placements:
                if manifests.is_fractional(p) and not replica[p.worker]:
                    share = f"{ns}/{names.pod_name(stem, req.attempt, p.worker)}"
                    self.reservations.ensure(p.node, p.gpus[0], share)
            pods = [
                self._ensure(
                    "pods",
                    manifests.worker_pod(
                        req, p, stem, ns, hosts, self.config, replica=replica[p.worker]
                    ),
                    req.job_id,
                )
                for p in req.placements
            ]
            for pod in pods:
                self._bind_if_ready(pod)
            if pods:
                where = ", ".join(sorted({p.node for p in req.placements}))
                self.events.emit(
                    pods[0],
                    "Launched",
                    f"attempt {req.attempt} of job {req.job_id}: {len(pods)} worker(s) on {where}",
                )

    def stop(self, job_id: str, grace_period_s: float, *, reason: str = "Stopped") -> None:
        """Delete the job's pods with the grace period (the kubelet sends SIGTERM, then
        SIGKILL), after setting `shoal.dev/stop-reason` and, for a preemption only,
        `shoal.dev/preempted` (files in the pod); then its
        Service and ConfigMaps, and any GPU reservation it was the last share of.

        A repeat (the loop stops a draining attempt every cycle until its pods are gone)
        costs no API call while the pod cache shows none of the job's pods still alive
        and undeleted: no LIST per draining job per cycle."""
        with self._lock:
            if job_id in self._stopped and not self._alive_in_cache(job_id):
                return
            self._stopped.add(job_id)
            pods = self._job_pods(job_id)
            used = {names.labels_of(p).get(names.RESERVATION) for p in pods} - {None}
            for pod in pods:
                meta = pod["metadata"]
                if meta.get("deletionTimestamp"):
                    continue
                marks = {names.STOP_REASON: str(reason)}
                if reason == base.StopReason.PREEMPTED:
                    marks[names.PREEMPTED] = "1"
                self._patch_quietly(pod, marks)
                self.events.emit(
                    pod,
                    reason,
                    f"stopping worker (grace {grace_period_s:.0f}s)",
                    events.WARNING if reason == "Preempted" else events.NORMAL,
                )
                self.kube.delete(
                    "pods", meta["name"], meta["namespace"], grace_period_s=graceful(grace_period_s)
                )
            self._delete_job_objects(job_id)
            for name in sorted(str(u) for u in used):
                self.reservations.release_if_unused(name)

    def workers(self) -> list[base.WorkerStatus]:
        """Every worker's state. A worker on a node that is gone or long NotReady, or
        with a `DisruptionTarget` condition, or refused by the kubelet at admission, is
        FAILED and `retryable` (the infrastructure's failure, not the job's)."""
        nodes = {n["metadata"]["name"]: n for n in self.node_cache.items()}
        broken = self.reservations.problems(self.index.reservation_pods())
        now = dt.datetime.now(dt.UTC)
        out = []
        # A bound, unfinished pod's node_failure depends on its node alone: once per node.
        by_node: dict[str, str | None] = {}
        for p, w in self.index.workers():
            if w.state is not base.WorkerState.FAILED:
                on = (p.get("spec") or {}).get("nodeName") or ""
                if on not in by_node or not inventory.holds_resources(p):
                    lost = status.node_failure(p, nodes, now, self.config.node_lost_s)
                    if inventory.holds_resources(p):
                        by_node[on] = lost
                else:
                    lost = by_node[on]
                if lost is None:
                    lost = broken.get(names.labels_of(p).get(names.RESERVATION, ""))
                if lost is None and not (p.get("spec") or {}).get("nodeName"):
                    lost = self._refused.get(p["metadata"].get("uid", ""))
                if lost is not None:
                    w = status.failed_by_infrastructure(w, lost)
                    if inventory.holds_resources(p) and lost in broken.values():
                        w = replace(w, still_running=True)
            out.append(w)
        return sorted(out, key=lambda w: (w.job_id, w.attempt, w.worker))

    # ---- start-up and foreign pods ----

    def allocations(self) -> dict[str, status.Allocation]:
        """job id -> what it holds now, rebuilt from pods (for the loop at start-up)."""
        return status.allocations(self.pod_cache.items())

    def foreign_pods(self) -> list[status.ForeignPod]:
        """Pending pods Shoal did not create that name it as their scheduler (less those
        whose binding is in flight)."""
        allowed = self.config.foreign_namespaces  # where RBAC lets Shoal patch and bind
        with self._flight_lock:
            flying = set(self._flight)
        return [
            replace(f, rules=eligible.also(f.rules, self.volumes.rules(f.namespace, f.claims)))
            if f.claims
            else f
            for key, f in self.index.foreign_pending()
            if (allowed is None or f.namespace in allowed)
            and key not in flying
            and f.uid not in self._bound
        ]

    def bind(self, pod: status.ForeignPod, placement: WorkerPlacement) -> bool:
        """Adopt a foreign pod as the single worker of job `pod.job_id` and bind it.
        False: it is fractional and waits for its GPU's UUID (reconcile binds it)."""
        ann = {
            names.JOB_ID: pod.job_id,
            names.NODE: placement.node,
            names.GPUS: names.gpus_text(placement.gpus),
        }
        if not manifests.is_fractional(placement):
            # One call: the Binding carries the annotations onto the pod (the API server
            # merges them), so the pod is never annotated and unbound, or the reverse.
            if pod.uid in self._bound:
                return True
            bound = self.kube.bind(pod.namespace, pod.name, placement.node, pod.uid, ann)
            self._bound.add(pod.uid)
            if bound:
                ref = {"metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}}
                why = f"Successfully assigned {pod.namespace}/{pod.name} to {placement.node}"
                if self._eventer is None:
                    self.events.emit(ref, "Scheduled", why)
                elif not self._closed.is_set():
                    self._eventer.submit(self.events.emit, ref, "Scheduled", why)
            return True
        if self._mps_replicas(placement.node):
            # Its container asks no `nvidia.com/gpu` (resources cannot change on a pod),
            # so it could not get the replica the placement counts on.
            raise base.BackendError(
                f"node {placement.node} shares GPUs as MPS replicas: a foreign pod gets a "
                "fraction there only by requesting nvidia.com/gpu: 1 itself"
            )
        patch: Obj = {"metadata": {"annotations": ann}}
        with self._lock:
            if manifests.is_fractional(placement):
                ann[names.GPU_FRACTION] = f"{placement.fraction:.4f}"
                ann[names.ENFORCEMENT] = str(base.Enforcement.ADVISORY)
                res = self.reservations.ensure(
                    placement.node, placement.gpus[0], f"{pod.namespace}/{pod.name}"
                )
                patch["metadata"]["labels"] = {names.RESERVATION: res["metadata"]["name"]}
            updated = self.kube.patch("pods", pod.name, patch, pod.namespace)
            return self._bind_if_ready(updated)

    # ---- ForeignWorkloads (for the loop) ----

    def foreign_requests(self) -> Sequence[JobRequest]:
        return [f.to_job_request() for f in self.foreign_pods()]

    def foreign_running(self) -> Sequence[RunningJob]:
        """Adopted foreign pods, and those whose binding is in flight (at the placement
        the loop chose: their GPUs are taken from the moment of the decision); and the
        GPUs reservation pods hold beyond their shares until they are gone (`holds`)."""
        counts = {n: m[2].gpu_count for n, m in self._node_memo.items() if m[2] is not None}
        held = self.reservations.holds(self.index.reservation_users(), self.index.share_of, counts)
        with self._flight_lock:
            unsettled = {key: fp.uid for key, (fp, _) in self._flight.items()}
            running, settled = self.index.adopted(unsettled)
            for key in settled:
                del self._flight[key]
            flying = [
                RunningJob(fp.to_job_request(), (p,))
                for key, (fp, p) in self._flight.items()
                if key not in settled
            ]
        return sorted([*running, *flying, *held], key=lambda r: r.job.id)

    def note_pending(self, job_id: str, message: str) -> None:
        """Say why a foreign pod waits, as kube-scheduler does: `PodScheduled=False`
        (reason Unschedulable) on its status and a `FailedScheduling` Warning event.
        Called by the loop when the reason changes."""
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
        """Bind the foreign pod `job_id` at `placement`: a whole-GPU one on the binding
        pool (this returns at once), a fraction here. A binding that failed in the pool
        raises here, the next time the loop places that pod (its per-job backoff)."""
        with self._flight_lock:
            failed = self._bind_failed.pop(job_id, None)
        if failed is not None:
            raise failed
        key = self.index.key_of_job(job_id)
        pod = self.index.pending(key) if key is not None else None
        allowed = self.config.foreign_namespaces
        if key is None or pod is None or pod.uid in self._bound:
            return
        if allowed is not None and pod.namespace not in allowed:
            return
        if self._binder is None or manifests.is_fractional(placement):
            self.bind(pod, placement)
            return
        with self._flight_lock:
            if key in self._flight:
                return
            self._flight[key] = (pod, placement)
        self._binder.submit(self._bind_in_pool, key, pod, placement)

    def _bind_in_pool(self, key: str, pod: status.ForeignPod, placement: WorkerPlacement) -> None:
        try:
            self.bind(pod, placement)
        except Exception as e:  # the pod waits again; the loop backs off its job
            log.warning("binding %s to %s failed: %s", key, placement.node, e)
            with self._flight_lock:
                self._flight.pop(key, None)
                self._bind_failed[pod.job_id] = e
            self.on_change()

    # ---- reconcile ----

    def reconcile(self) -> None:
        """One pass of the background upkeep (safe to call from the loop too)."""
        if not self.is_leader():
            return
        with self._lock:
            pods = self.pod_cache.items()
            for pod in pods:
                if not status.is_worker(pod) or pod["metadata"].get("deletionTimestamp"):
                    continue
                uid = pod["metadata"].get("uid", "")
                if not pod["spec"].get("nodeName") and uid not in self._bound:
                    # A fraction's UUID came, or a crash interrupted a launch. The cache
                    # may lag behind our own binding: read the pod again first. One
                    # pod's refused binding is that pod's (its worker fails, retryable),
                    # not the end of this pass for every other pod.
                    try:
                        live = self.kube.get(
                            "pods", pod["metadata"]["name"], pod["metadata"]["namespace"]
                        )
                        if live and not live["metadata"].get("deletionTimestamp"):
                            self._bind_if_ready(live)
                    except ApiError as e:
                        if e.transient:
                            raise
                        log.warning("binding %s refused: %s", pod["metadata"]["name"], e)
                        self._refused[uid] = f"binding refused: {e}"
                elif (pod.get("status") or {}).get("phase") == "Failed":
                    self._report_failure(pod)
            self.reservations.sweep(pods)
            self._report_reservation_problems(pods)
            self._expire_finished(pods)
            self._bound &= {p["metadata"].get("uid", "") for p in pods}
            uids = {p["metadata"].get("uid", "") for p in pods}
            self._refused = {k: v for k, v in self._refused.items() if k in uids}
            self._stopped &= {names.annotations_of(p).get(names.JOB_ID, "") for p in pods}
            waiting = {f.job_id for _, f in self.index.foreign_pending()}
            with self._flight_lock:
                self._bind_failed = {k: v for k, v in self._bind_failed.items() if k in waiting}

    def _run(self) -> None:
        while not self._closed.wait(self.config.reconcile_interval_s):
            try:
                self.reconcile()
                self.last_error = None
            except Exception as e:  # keep upkeep going; say what fails
                self.last_error = f"{type(e).__name__}: {e}"
                log.warning("reconcile failed: %s", self.last_error)

    # ---- helpers ----

    def _ensure(self, resource: str, body: Obj, job_id: str) -> Obj:
        """Create `body`; if it exists and Shoal made it for this job, that is success."""
        meta = body["metadata"]
        try:
            return self.kube.create(resource, body, meta["namespace"])
        except ApiError as e:
            if e.status != 409:
                raise
        found = self.kube.get(resource, meta["name"], meta["namespace"])
        if found is None:
            return self.kube.create(resource, body, meta["namespace"])
        if not names.is_managed(found) or names.annotations_of(found).get(names.JOB_ID) != job_id:
            raise ApiError(
                409,
                "Conflict",
                f"{resource} {meta['namespace']}/{meta['name']} "
                "exists and does not belong to this job",
            )
        return found

    def _bind_if_ready(self, pod: Obj) -> bool:
        """Bind to the annotated node; a fraction first gets its reservation's UUID."""
        meta = pod["metadata"]
        if pod["spec"].get("nodeName") or meta.get("uid") in self._bound:
            return True
        if status.gates(pod):  # the API server refuses it (a webhook gated our pod)
            return False
        ann, node = names.annotations_of(pod), names.annotations_of(pod).get(names.NODE, "")
        replica = bool(ann.get(names.GPU_REPLICA))  # the device plugin supplies the GPU
        if names.GPU_FRACTION in ann and not ann.get(names.GPU_UUID) and not replica:
            uuid = self.reservations.uuid(names.labels_of(pod).get(names.RESERVATION, ""))
            if not uuid:
                return False
            kind = self.config.share_cdi_kind  # the NVIDIA runtime in CDI mode resolves it
            ann_patch = {names.GPU_UUID: uuid, names.GPU_DEVICE: f"{kind}={uuid}" if kind else uuid}
            self.kube.patch(
                "pods",
                meta["name"],
                {"metadata": {"annotations": ann_patch}},
                meta["namespace"],
            )
        bound = self.kube.bind(meta["namespace"], meta["name"], node, meta.get("uid", ""))
        self._bound.add(meta.get("uid", ""))
        if bound:
            self.events.emit(
                pod,
                "Scheduled",
                f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}",
            )
        return True

    def _alive_in_cache(self, job_id: str) -> bool:
        """Does the cache show a pod of `job_id` not yet deleted and not finished?"""
        for p in self.pod_cache.items():
            ann = names.annotations_of(p)
            if (
                ann.get(names.JOB_ID) == job_id
                and not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in inventory.TERMINAL
            ):
                return True
        return False

    def _job_pods(self, job_id: str) -> list[Obj]:
        key = self.index.key_of_job(job_id)
        cached = self.pod_cache.get(key) if key is not None else None
        if cached is not None:  # an adopted foreign pod: read it fresh
            meta = cached["metadata"]
            pod = self.kube.get("pods", meta["name"], meta.get("namespace", ""))
            return [pod] if pod else []
        pods, _ = self.kube.list(
            "pods", self.config.namespace, labels=f"{names.JOB}={names.label_value(job_id)}"
        )
        return [p for p in pods if names.annotations_of(p).get(names.JOB_ID) == job_id]

    def _delete_job_objects(self, job_id: str) -> None:
        selector = f"{names.JOB}={names.label_value(job_id)},{names.MANAGED_BY}={names.SHOAL}"
        for resource in ("services", "configmaps"):
            items, _ = self.kube.list(resource, self.config.namespace, labels=selector)
            for obj in items:
                if names.annotations_of(obj).get(names.JOB_ID) == job_id:
                    self.kube.delete(resource, obj["metadata"]["name"], self.config.namespace)

    def _patch_quietly(self, pod: Obj, ann: dict[str, str]) -> None:
        try:
            self.kube.patch(
                "pods",
                pod["metadata"]["name"],
                {"metadata": {"annotations": ann}},
                pod["metadata"]["namespace"],
            )
        except ApiError as e:  # the signal is a courtesy; deletion is what counts
            log.info("could not annotate %s: %s", pod["metadata"]["name"], e)

    def _report_failure(self, pod: Obj) -> None:
        uid = pod["metadata"].get("uid", pod["metadata"]["name"])
        if uid in self._reported:
            return
        self._reported.add(uid)
        w = status.worker_status(pod)
        self.events.emit(
            pod,
            "WorkerFailed",
            f"worker {w.worker} of job {w.job_id} failed (exit code {w.exit_code}): {w.message}",
            events.WARNING,
        )

    def _report_reservation_problems(self, pods: list[Obj]) -> None:
        broken = self.reservations.problems(pods)
        for pod in pods:
            name, uid = pod["metadata"]["name"], pod["metadata"].get("uid", "")
            if name in broken and f"res:{uid}" not in self._reported:
                self._reported.add(f"res:{uid}")
                self.events.emit(pod, "ReservationFailed", broken[name], events.WARNING)

    def _expire_finished(self, pods: list[Obj]) -> None:
        ttl = self.config.finished_ttl_s
        if ttl is None:
            return
        by_job: dict[str, list[Obj]] = {}
        for p in pods:
            if status.is_worker(p) and names.is_managed(p):
                by_job.setdefault(names.annotations_of(p)[names.JOB_ID], []).append(p)
        now = time.monotonic()
        for job, group in by_job.items():
            if any((p.get("status") or {}).get("phase") not in inventory.TERMINAL for p in group):
                self._finished_since.pop(job, None)
                continue
            since = self._finished_since.setdefault(job, now)
            if now - since >= ttl:
                log.info("deleting finished job %s's objects (ttl %.0fs)", job, ttl)
                for p in group:
                    self.kube.delete("pods", p["metadata"]["name"], p["metadata"]["namespace"])
                self._delete_job_objects(job)
                self._finished_since.pop(job, None)


if TYPE_CHECKING:  # mypy checks that the backend satisfies the shared interface
    _conforms: type[base.ClusterBackend] = KubernetesBackend
    _foreign: type[base.ForeignWorkloads] = KubernetesBackend
