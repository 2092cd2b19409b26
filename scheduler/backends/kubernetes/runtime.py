"""The Kubernetes side of `shoal serve`: the backend, leader election and the tasks that
run only in the leader (the CR watcher), built from plain settings and stopped together.

`KubeRuntime` owns one API client shared by them. With an `Election`, a `LeaderElector`
runs from the start, `is_leader()` follows it, the backend's upkeep runs only while it
leads, and the scheduler loop is meant to cycle only while it leads (the store's lease
stays as the inner guard). Leader tasks (`LeaderTask`; `shoal serve` passes the CR
watcher, `scheduler.controller.watcher.leader_task`) are started by a supervisor thread
on gaining the Lease and stopped on losing it. Without an `Election` this replica always
leads. The runtime is given those tasks rather than building them: a backend imports
neither the controller nor the store.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduler.backends.kubernetes.backend import KubernetesBackend
from scheduler.backends.kubernetes.client.api import Kube
from scheduler.backends.kubernetes.client.leader import LeaderElector
from scheduler.backends.kubernetes.config import KubeConfig, api_client

log = logging.getLogger(__name__)

# Started on gaining the Lease with (API client, jobs namespace, stop event); returns its
# threads, which end once the event is set (on losing the Lease, or at close).
LeaderTask = Callable[[Any, tuple[str, ...], threading.Event], list[threading.Thread]]


@dataclass(frozen=True)
class Election:
    """Where the Lease is and who this replica is."""

    namespace: str
    identity: str
    lease_name: str = "shoal-scheduler"
    lease_duration_s: int = 15
    renew_every_s: float | None = None  # None: a third of the duration, as client-go


# SHOAL_KUBE_OPTIONS_FILE's keys (the chart's kube-options.json) -> KubeConfig fields.
KUBE_OPTIONS = {
    "foreignNamespaces": "foreign_namespaces",
    "teamNamespaces": "team_namespaces",
    "reserveNamespace": "reserve_namespace",
    "reserveImagePullSecrets": "reserve_image_pull_secrets",
    "reservePriorityClass": "reserve_priority_class",
    "reserveRuntimeClass": "reserve_runtime_class",
    "reserveMemoryMiB": "reserve_memory_mib",
    "reservationUuidTimeoutSeconds": "reservation_uuid_timeout_s",
    "nodeLostSeconds": "node_lost_s",
    "shareCdiKind": "share_cdi_kind",
    "clientQps": "qps",
    "clientBurst": "burst",
    "bindWorkers": "bind_workers",
    "launchWorkers": "launch_workers",
    "workerPriorityClass": "priority_class",
    "workerRuntimeClass": "runtime_class",
    "workerShmMiB": "shm_mib",
    "dra": "dra",
    "draGpuClass": "dra_gpu_class",
    "draMigClass": "dra_mig_class",
    "nodePoolKey": "pool_key",
    "nodePoolValue": "pool_value",
    "draOutsidePool": "dra_outside_pool",
    "nominateFor": "nominate_for",
    "workloads": "workloads",
}


def with_options(cfg: KubeConfig, options: Mapping[str, Any] | None) -> KubeConfig:
    """`cfg` with the kube-options.json values set; an unknown key raises ValueError
    naming it. Lists become tuples; null keeps the default."""
    changes: dict[str, Any] = {}
    for key, value in (options or {}).items():
        if key not in KUBE_OPTIONS:
            raise ValueError(f"SHOAL_KUBE_OPTIONS_FILE: unknown key {key!r}")
        if value is None:
            continue
        changes[KUBE_OPTIONS[key]] = tuple(value) if isinstance(value, list) else value
    return replace(cfg, **changes)


def kube_config(
    *,
    namespace: str = "shoal-jobs",
    scheduler_name: str = "shoal",
    host: str | None = None,
    kubeconfig: str | None = None,
    reserve_image: str | None = None,
    security_context: Mapping[str, Any] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    base: KubeConfig | None = None,
) -> KubeConfig:
    """A `KubeConfig` from the chart's settings; unset ones keep `base`'s defaults."""
    cfg = replace(
        base or KubeConfig(),
        namespace=namespace,
        scheduler_name=scheduler_name,
        host=host,
        kubeconfig=kubeconfig,
        tolerations=tuple(tolerations),
    )
    if reserve_image:
        cfg = replace(cfg, reserve_image=reserve_image)
    if security_context is not None:
        cfg = replace(cfg, security_context=dict(security_context))
    return cfg


class KubeRuntime:
    """Backend + elector + leader tasks. `close()` stops them all (and releases the Lease)."""

    def __init__(
        self,
        config: KubeConfig,
        *,
        leader_tasks: Sequence[LeaderTask] = (),
        election: Election | None = None,
        client: Any = None,
        sync_timeout_s: float = 30.0,
        on_leader_change: Callable[[bool], None] | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.client = client if client is not None else api_client(config)
        self.elector: LeaderElector | None = None
        if election is not None:
            self.elector = LeaderElector(
                Kube(self.client, config),
                election.namespace,
                election.identity,
                name=election.lease_name,
                lease_duration_s=election.lease_duration_s,
                renew_every_s=election.renew_every_s or max(0.2, election.lease_duration_s / 3),
            )
        self.leader_tasks = tuple(leader_tasks)
        self.on_leader_change = on_leader_change
        self._stop = threading.Event()
        self._lead_stop: threading.Event | None = None
        self._lead_threads: list[threading.Thread] = []
        self._supervisor: threading.Thread | None = None
        if self.elector is not None:
            self.elector.start()
        self.backend = KubernetesBackend(
            config,
            client=self.client,
            is_leader=self.is_leader,
            sync_timeout_s=sync_timeout_s,
            on_change=on_change,
        )
        if self.elector is not None:
            # Every write the backend makes is fenced by the renew deadline.
            self.backend.kube.fence = self.elector.leader_until
        self._supervisor = threading.Thread(
            target=self._supervise, name="shoal-kube-runtime", daemon=True
        )
        self._supervisor.start()

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    @property
    def cr_watching(self) -> bool:
        """Whether the leader tasks (the CR watcher) run now."""
        return self._lead_stop is not None

    def _supervise(self) -> None:
        # Polled, not pushed: LeaderElector has no callbacks, and leadership only
        # changes on its renew period anyway.
        leading = False
        while not self._stop.is_set():
            now = self.is_leader()
            if now != leading:
                leading = now
                log.info("leadership %s", "gained" if now else "lost")
                if now:
                    self._start_leader_tasks()
                else:
                    self._stop_leader_tasks()
                if self.on_leader_change is not None:
                    self.on_leader_change(now)
            self._stop.wait(0.2)
        self._stop_leader_tasks()

    def _start_leader_tasks(self) -> None:
        if not self.leader_tasks or self._lead_stop is not None:
            return
        stop = self._lead_stop = threading.Event()
        self._lead_threads = [
            thread
            for task in self.leader_tasks
            for thread in task(self.client, self.config.job_namespaces, stop)
        ]

    def _stop_leader_tasks(self) -> None:
        if self._lead_stop is not None:
            self._lead_stop.set()
            self._lead_stop = None

    def close(self) -> None:
        """Stop the leader tasks, the backend's caches, then give up the Lease."""
        self._stop.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=2)
        self._stop_leader_tasks()
        self.backend.close()
        if self.elector is not None:
            self.elector.stop(release=True)


def from_settings(
    settings: Any,
    *,
    leader_tasks: Sequence[LeaderTask] = (),
    on_leader_change: Callable[[bool], None] | None = None,
    on_change: Callable[[], None] | None = None,
) -> KubeRuntime:
    """The runtime `shoal serve --backend kubernetes` runs, from its `ServeSettings`
    (scheduler.cli.settings; typed loosely so this package does not import the CLI)."""
    cfg = kube_config(
        namespace=settings.jobs_namespace,
        scheduler_name=settings.scheduler_name,
        host=settings.kube_api_url,
        kubeconfig=settings.kubeconfig,
        reserve_image=settings.reserve_image,
        security_context=settings.worker_security_context,
        tolerations=settings.worker_tolerations,
    )
    cfg = with_options(cfg, getattr(settings, "kube_options", None))
    election = None
    if settings.leader_election:
        if not settings.pod_name:
            raise ValueError("SHOAL_LEADER_ELECTION needs SHOAL_POD_NAME (the identity)")
        election = Election(
            namespace=settings.leader_namespace,
            identity=settings.pod_name,
            lease_name=settings.lease_name,
            lease_duration_s=settings.lease_duration_s,
        )
    return KubeRuntime(
        cfg,
        leader_tasks=leader_tasks,
        election=election,
        on_leader_change=on_leader_change,
        on_change=on_change,
    )
