"""The Kubernetes cluster backend: Shoal's `ClusterBackend` on a real cluster.

The scheduler loop calls it (only while its replica leads). Reads come from
list-and-watch caches of Nodes and Pods; writes go to the API server with bounded
retries and are idempotent: objects have deterministic names, 409 AlreadyExists on an
object Shoal owns counts as success, and a pod already bound is never bound again.
This class holds the caches and reads nodes and workers; its collaborators do the
writing: `WorkerPods` launches and stops workers (`resize` grows and shrinks an elastic
job's), `ForeignBindings` adopts foreign pods, `Upkeep` is the background reconcile.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from scheduler.backends import base
from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.client import events
from scheduler.backends.kubernetes.client.api import Kube
from scheduler.backends.kubernetes.client.apierrors import Unavailable
from scheduler.backends.kubernetes.client.reflector import Reflector
from scheduler.backends.kubernetes.config import KubeConfig, api_client
from scheduler.backends.kubernetes.dra.draclaims import DraClaims
from scheduler.backends.kubernetes.foreignpods.draforeign import ForeignClaims
from scheduler.backends.kubernetes.foreignpods.foreign import ForeignBindings
from scheduler.backends.kubernetes.foreignpods.nodefit import NodeFit
from scheduler.backends.kubernetes.nodeview import NodeView
from scheduler.backends.kubernetes.pods import disruption, resize
from scheduler.backends.kubernetes.pods.handle import Handle
from scheduler.backends.kubernetes.pods.launchpool import LaunchPool
from scheduler.backends.kubernetes.pods.podbinder import PodBinder
from scheduler.backends.kubernetes.pods.workerpods import WorkerPods
from scheduler.backends.kubernetes.reservations import shares
from scheduler.backends.kubernetes.upkeep import Upkeep
from scheduler.backends.kubernetes.view import inventory, podfit, podindex, podrules, status
from scheduler.model import JobRequest, Node, NodeRules, RunningJob, WorkerPlacement
from scheduler.placement import eligible
from scheduler.spec import JobSpec

log = logging.getLogger(__name__)
Obj = dict[str, Any]


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
        # PodDisruptionBudgets: which victims a stop would wait for (the core prefers
        # others), and the evictions they refused.
        self.pdb_cache = Reflector(self.kube, "poddisruptionbudgets")
        self.budgets = disruption.Budgets(self.pdb_cache)
        self.evictions = disruption.Evictions(self.budgets)
        self.events = events.Recorder(self.kube.fork(), self.config.event_component)
        self.reservations = shares.Reservations(self.kube, self.config, self.events)
        # Claims' volumes as node rules, for foreign pods and Shoal's jobs alike.
        self.volumes = podrules.VolumeRules(self.kube)
        # DRA: the devices drivers publish, their classes, and every claim's allocation.
        self.dra_caches = (
            [Reflector(self.kube, r) for r in ("resourceslices", "deviceclasses", "resourceclaims")]
            if self.config.dra
            else []
        )
        self.claims: DraClaims | None = None
        if self.dra_caches:
            slices, classes, claims = self.dra_caches
            self.claims = DraClaims(
                self.kube, self.config, slices, classes, claims, nodes=self.node_cache.get
            )
        self.is_leader = is_leader
        self.last_error: str | None = None
        self._lock = threading.RLock()  # launch/stop/reconcile never interleave
        self._closed = threading.Event()
        self._nodes = NodeView(
            self.node_cache, self.index, self.reservations, self.claims, self.config
        )
        self._thread: threading.Thread | None = None
        # Launches for the loop run here, off its thread (`launchpool`); 0: on its thread.
        self._launches = (
            LaunchPool(self._launch_now, self.config.launch_workers, lambda: self.on_change())
            if self.config.launch_workers > 0
            else None
        )
        self._make_collaborators()
        if start:
            self.start(sync_timeout_s)

    def _make_collaborators(self) -> None:
        kube, cfg = self.kube, self.config
        self._fit = NodeFit(self.node_cache, self.index)
        self._binder = PodBinder(kube, cfg, self.reservations, self.events, self.claims)
        handle = Handle(
            kube,
            cfg,
            self.pod_cache,
            self.index,
            self.reservations,
            self.events,
            self._binder,
            self._lock,
            self._nodes.mps_replicas,
        )
        self._workers = WorkerPods(
            handle, dra=self._nodes.dra, evictions=self.evictions, nodes=self.node_cache.get
        )
        self._foreign = ForeignBindings(
            handle,
            volumes=self.volumes,
            fit=self._fit,
            closed=self._closed,
            on_change=lambda: self.on_change(),  # read per call: it may be replaced
            dra=ForeignClaims(kube, self.claims) if self.claims is not None else None,
        )
        self._upkeep = Upkeep(handle, workers=self._workers, foreign=self._foreign)

    # ---- lifecycle ----

    def start(self, sync_timeout_s: float = 30.0) -> None:
        """Start the caches (and the reconcile thread); wait for their first list."""
        for cache in self._all_caches():
            cache.start()
        for cache in self._all_caches():
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
        for cache in self._all_caches():
            cache.stop()
        self._foreign.close()
        if self._launches is not None:
            self._launches.close()

    def _all_caches(self) -> list[Reflector]:
        return [self.node_cache, self.pod_cache, self.pdb_cache, *self.dra_caches]

    def errors(self) -> dict[str, str]:
        """What is failing now (empty when healthy): caches and the reconcile step."""
        out = {c.resource: c.last_error for c in self._all_caches()}
        out["reconcile"] = self.last_error
        return {k: v for k, v in out.items() if v}

    # ---- ClusterBackend ----

    def capabilities(self) -> base.Capabilities:
        return base.Capabilities(
            resizable=self,
            foreign=self,
            pending_notes=self,
            capacity=self,
            excluded_nodes=self,
            disruptions=self,
            job_rules=self,
            spec_refusals=self,
            async_launches=self if self._launches is not None else None,
        )

    def job_rules(self, spec: JobSpec) -> NodeRules | None:
        """Where a pending job's workers may run by what its pods will ask beyond the
        spec's own rules: its claims' volumes, by the rules foreign pods get
        (`podrules.VolumeRules`: a bound volume's node affinity, a claim not bound yet
        refused with why), and its extended resources, by the nodes that lack room for
        one worker's (`nodefit`: the core does not count them)."""
        ns = self.config.namespace_of(spec)
        out = self.volumes.rules(ns, spec.claims) if spec.claims else None
        if spec.resources:
            wanted = {name: str(amount) for name, amount in spec.resources.items()}
            one = {"spec": {"containers": [{"resources": {"requests": wanted}}]}}
            out = eligible.also(out, self._fit.view().rules(podfit.ask(one)))
        return out

    def nodes(self) -> list[Node]:
        """`inventory.schedulable_nodes`, from the index's foreign totals (`NodeView`)."""
        return self._nodes.nodes()

    def capacity(self) -> list[Node]:
        """Every node as if empty, cordoned and NotReady ones too (`inventory.Capacity`)."""
        return self._nodes.capacity()

    def excluded_nodes(self) -> dict[str, str]:
        """node -> why Shoal does not offer it, or offers no fractions there."""
        return self._nodes.excluded_nodes()

    def spec_refusals(self, spec: JobSpec) -> list[tuple[tuple[str | int, ...], str]]:
        """A namespace Shoal is not given (`names.namespace_refusals`)."""
        return names.namespace_refusals(spec, self.config.job_namespaces)

    def launch(self, request: base.LaunchRequest) -> None:
        self._refuse(request)
        self._workers.launch(request)

    def launch_async(self, request: base.LaunchRequest, guard: Callable[[str], None]) -> None:
        """`launch` on the launch pool (`launchpool`): this returns at once."""
        assert self._launches is not None, "async_launches is offered only with a pool"
        self._refuse(request)
        self._launches.start(request, guard)

    def settled(self) -> list[tuple[base.LaunchRequest, Exception | None]]:
        return self._launches.settled() if self._launches is not None else []

    def _launch_now(self, request: base.LaunchRequest) -> None:
        """A launch on the pool: only while this replica leads (the Lease)."""
        if not self.is_leader():
            err = base.BackendError("launch not made: this replica no longer leads")
            err.transient = True
            raise err
        self._workers.launch(request)

    def _refuse(self, request: base.LaunchRequest) -> None:
        if refused := self.spec_refusals(request.spec):  # one the API did not check
            loc, why = refused[0]
            raise base.BackendError(f"{'.'.join(map(str, loc))}: {why}")

    def stop(self, job_id: str, grace_period_s: float, *, reason: str = "Stopped") -> None:
        """Evict (a preemption, a broken gang's rest: PodDisruptionBudgets are honoured,
        `workerpods`) or delete the job's pods with the grace period (the kubelet sends
        SIGTERM, then SIGKILL), after setting `shoal.dev/stop-reason` and, for a
        preemption only, `shoal.dev/preempted` (files in the pod); then its
        Service and ConfigMaps, and any GPU reservation it was the last share of.

        A repeat (the loop stops a draining attempt every cycle until its pods are gone)
        costs no API call while the pod cache shows none of the job's pods still alive
        and undeleted: no LIST per draining job per cycle. A launch of the job on the
        pool is cancelled first (or waited for, once under way)."""
        if self._launches is not None:
            self._launches.cancel(job_id)
        self._workers.stop(job_id, grace_period_s, reason=reason)

    def disruption_blocked(self) -> dict[str, str]:
        """job id -> the PodDisruptionBudget that holds its workers ("ns/name: why"):
        one selecting a worker that allows no disruption now, or one that refused an
        eviction of a stop already made (that stop waits, `workerpods`)."""
        out: dict[str, str] = {}
        if self.budgets.holding():  # else no pod needs matching (mostly so)
            # Shoal's workers and the foreign pods it adopted (workers by their job id).
            out = self.budgets.blocking((w.job_id, p) for p, w in self.index.workers())

        def alive(key: str) -> bool:
            pod = self.pod_cache.get(key)
            return pod is not None and not pod["metadata"].get("deletionTimestamp")

        out.update(self.evictions.blocked(alive))
        return out

    def grow(self, request: base.LaunchRequest) -> None:
        """Create and bind the pods of the new workers only (`resize.grow`)."""
        resize.grow(self._workers, request)

    def shrink(
        self, job_id: str, attempt: int, workers: Sequence[int], grace_period_s: float
    ) -> None:
        """Evict just these workers' pods, with the grace period (`resize.shrink`)."""
        resize.shrink(self._workers, job_id, attempt, workers, grace_period_s)

    def workers(self) -> list[base.WorkerStatus]:
        """Every worker's state. A worker on a node that is gone or long NotReady, or
        with a `DisruptionTarget` condition, or refused by the kubelet at admission, or a
        share whose check-in saw no GPU (which also turns sharing off on its node), is
        FAILED and `retryable` (the infrastructure's failure, not the job's)."""
        nodes = {n["metadata"]["name"]: n for n in self.node_cache.items()}
        broken = self.reservations.problems(self.index.reservation_pods())
        self.reservations.shares_without_gpu(p for p, _ in self.index.workers())
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
                    lost = self._upkeep.refused.get(p["metadata"].get("uid", ""))
                if lost is not None:
                    w = status.failed_by_infrastructure(w, lost)
                    if inventory.holds_resources(p) and lost in broken.values():
                        w = replace(w, still_running=True)
            elif w.still_running and status.node_failure(p, nodes, now, self.config.node_lost_s):
                # Failed already (an eviction's DisruptionTarget) but its node is gone or
                # long NotReady: nothing of it runs on to wait for.
                w = replace(w, still_running=False)
            out.append(w)
        out.extend(self._launching({(w.job_id, w.attempt, w.worker) for w in out}))
        return sorted(out, key=lambda w: (w.job_id, w.attempt, w.worker))

    def _launching(self, seen: set[tuple[str, int, int]]) -> list[base.WorkerStatus]:
        """The workers of launches on the pool the loop has not settled, that the pod
        cache does not show yet: pending where they were placed."""
        out = []
        for r in self._launches.pending() if self._launches is not None else ():
            for p in r.placements:
                if (r.job_id, r.attempt, p.worker) not in seen:
                    out.append(
                        base.WorkerStatus(
                            r.job_id,
                            r.attempt,
                            p.worker,
                            base.WorkerState.PENDING,
                            node=p.node,
                            gpus=p.gpus,
                            fraction=p.fraction,
                            queue=r.spec.queue,
                        )
                    )
        return out

    # ---- start-up and foreign pods ----

    def allocations(self) -> dict[str, status.Allocation]:
        """job id -> what it holds now, rebuilt from pods (for the loop at start-up)."""
        return status.allocations(self.pod_cache.items())

    def foreign_pods(self) -> list[status.ForeignPod]:
        """Pending pods Shoal did not create that name it as their scheduler (less those
        whose binding is in flight)."""
        return self._foreign.pending()

    def bind(self, pod: status.ForeignPod, placement: WorkerPlacement) -> bool:
        """Adopt a foreign pod as the single worker of job `pod.job_id` and bind it.
        False: it is fractional and waits for its GPU's UUID (reconcile binds it)."""
        return self._foreign.bind(pod, placement)

    # ---- ForeignWorkloads (for the loop) ----

    def foreign_requests(self) -> Sequence[JobRequest]:
        return self._foreign.requests()

    def foreign_running(self) -> Sequence[RunningJob]:
        """Adopted foreign pods, and those whose binding is in flight (at the placement
        the loop chose: their GPUs are taken from the moment of the decision); and the
        GPUs reservation pods hold beyond their shares until they are gone (`holds`)."""
        return self._foreign.running(self._nodes.gpu_counts())

    def note_pending(self, job_id: str, message: str) -> None:
        """Say why a foreign pod waits, as kube-scheduler does: `PodScheduled=False`
        (reason Unschedulable) on its status and a `FailedScheduling` Warning event.
        Called by the loop when the reason changes."""
        self._foreign.note_pending(job_id, message)

    def bind_foreign(self, job_id: str, placement: WorkerPlacement) -> None:
        """Bind the foreign pod `job_id` at `placement`: a whole-GPU one on the binding
        pool (this returns at once), a fraction here. A binding that failed in the pool
        raises here, the next time the loop places that pod (its per-job backoff)."""
        self._foreign.bind_foreign(job_id, placement)

    # ---- reconcile ----

    def reconcile(self) -> None:
        """One pass of the background upkeep (safe to call from the loop too)."""
        if self.is_leader():
            self._upkeep.reconcile()

    def _run(self) -> None:
        while not self._closed.wait(self.config.reconcile_interval_s):
            try:
                self.reconcile()
                self.last_error = None
            except Exception as e:  # keep upkeep going; say what fails
                self.last_error = f"{type(e).__name__}: {e}"
                log.warning("reconcile failed: %s", self.last_error)


if TYPE_CHECKING:  # mypy checks that the backend satisfies the shared interface
    _conforms: type[base.ClusterBackend] = KubernetesBackend
    _foreign: type[base.ForeignWorkloads] = KubernetesBackend
    _resizable: type[base.Resizable] = KubernetesBackend
