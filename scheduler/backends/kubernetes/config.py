"""Settings of the Kubernetes backend, and the construction of the official client.

The Helm chart's ConfigMap maps onto `KubeConfig`; `api_client()` builds a
`kubernetes.client.ApiClient` from in-cluster credentials, a kubeconfig, or an explicit
host (tests point it at the fake API server).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kubernetes

from scheduler.spec import JobSpec

SCHEDULER_NAME = "shoal"
# A CDI kind, `vendor/class` (tags.cncf.io/container-device-interface/pkg/parser).
CDI_KIND = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[a-zA-Z0-9]([a-zA-Z0-9_.-]*[a-zA-Z0-9])?$")
# A label key (an optional DNS prefix and a name) and a non-empty label value.
LABEL_KEY = re.compile(
    r"^([a-z0-9]([a-z0-9.-]*[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
# Connections kept beyond the binding threads' (see `api_client`).
POOL_HEADROOM = 16


def baseline_security_context() -> dict[str, Any]:
    """A container securityContext that Pod Security "baseline" and "restricted" admit
    (except runAsNonRoot, which depends on the image, so it is left to the config)."""
    return {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_security_context(run_as_user: int | None = 1000) -> dict[str, Any]:
    """The baseline context plus `runAsNonRoot` (and a non-root `runAsUser`, for images
    whose default user is root): what Pod Security "restricted" admits."""
    sc = {**baseline_security_context(), "runAsNonRoot": True}
    if run_as_user is not None:
        sc["runAsUser"] = run_as_user
    return sc


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """Everything the backend needs to know about the cluster it runs on."""

    namespace: str = "shoal-jobs"  # where worker pods and their Services live
    # More namespaces Shoal runs jobs in (the chart's teamNamespaces, a Role in each): a
    # job that names one gets its pods, Service and claims there; any other is refused.
    team_namespaces: tuple[str, ...] = ()
    # Where GPU reservation pods live: a namespace of their own keeps them out of the jobs
    # namespace's ResourceQuota, LimitRanges and `kubectl get pods`. None: `namespace`.
    reserve_namespace: str | None = None
    scheduler_name: str = SCHEDULER_NAME
    host: str | None = None  # explicit API server URL; None: in-cluster, then kubeconfig
    kubeconfig: str | None = None
    # Taints Shoal's pods tolerate, as pod `tolerations` entries; tainted nodes whose
    # NoSchedule/NoExecute taints are all tolerated stay schedulable.
    tolerations: Sequence[Mapping[str, str]] = ()
    security_context: Mapping[str, Any] = field(default_factory=baseline_security_context)
    service_account: str | None = None  # for worker pods; None: the namespace default
    # Worker pods' PriorityClass (the chart's workerPriorityClassName; a job's own
    # `priorityClassName` wins); None: none, so
    # priority 0 (or the cluster's globalDefault class).
    priority_class: str | None = None
    # Worker pods' RuntimeClass (the chart's workerRuntimeClassName), and reservation
    # pods' unless `reserve_runtime_class` names another: the NVIDIA Container Runtime's
    # class (e.g. "nvidia") where it is not the node's default. A share requests no
    # `nvidia.com/gpu`: only that runtime hands it its GPU (from NVIDIA_VISIBLE_DEVICES).
    # None: the node's default runtime, and no sharing on nodes whose device plugin
    # hands GPUs over by CDI (docs/kubernetes.md, "GPU sharing and the runtime").
    runtime_class: str | None = None
    # A GPU worker's /dev/shm: a memory-backed emptyDir of this many MiB (NCCL and
    # PyTorch's DataLoader outgrow the runtime's 64 MiB); None: half the worker's memory
    # (tmpfs pages count against its memory limit); 0: none (the runtime's default).
    shm_mib: int | None = None
    reserve_image: str = "ghcr.io/shoal-dev/shoal:latest"  # runs the reserver
    reserve_service_account: str = "shoal-reserve"  # may patch its own pod
    reserve_image_pull_secrets: tuple[str, ...] = ()  # for a private registry
    # A high PriorityClass (the chart makes one): neither kube-scheduler preemption nor the
    # kubelet's eviction under pressure should take a GPU its shares run on.
    reserve_priority_class: str | None = None
    reserve_runtime_class: str | None = None  # e.g. "nvidia" where the runtime needs it
    # The reserver's memory request and limit, sized from its measured peak RSS: 58 MB with
    # nvidia-ml-py loaded, on an H200 with driver 580 (issue 23; 21 MiB without NVML, as
    # bench/reserve_rss.py measures it here). Twice the NVML figure plus headroom.
    reserve_memory_mib: int = 128
    # A reservation that reports no GPU UUID this long after it was bound (image pull
    # failing, no GPU, a crash loop) is replaced and its shares are failed (re-placed).
    reservation_uuid_timeout_s: float = 180.0
    # A node where a reservation pod found no GPU (exit 3: the device plugin's GPU does
    # not reach containers as configured) is excluded, with that reason, this long; then
    # tried again.
    sharing_retry_s: float = 600.0
    # Namespaces whose foreign pods (schedulerName: shoal, made by others) Shoal adopts:
    # None: all (the chart's rbac.foreignPods=true); else only these, where its RBAC lets
    # it patch and bind pods (rbac.foreignPods=false: the jobs namespace).
    foreign_namespaces: tuple[str, ...] | None = None
    # A CDI kind (e.g. "runtime.nvidia.com/gpu", or "nvidia.com/gpu" where the node's
    # CDI spec names devices by UUID): a share's NVIDIA_VISIBLE_DEVICES is then the
    # fully-qualified CDI device name `<kind>=<uuid>`, which the NVIDIA Container Runtime
    # in CDI mode resolves (its RuntimeClass: `runtime_class`). None: the bare UUID,
    # which its legacy mode takes, and its CDI mode qualifies with its default kind.
    share_cdi_kind: str | None = None
    # DRA (resource.k8s.io/v1): watch ResourceSlices, DeviceClasses and ResourceClaims,
    # and allocate claims for workers on nodes whose GPUs a DRA driver publishes. Off:
    # device-plugin GPUs only (a cluster without the API). The DeviceClasses whose
    # devices are whole GPUs and MIG slices: those of NVIDIA's DRA driver by default.
    dra: bool = True
    dra_gpu_class: str = "gpu.nvidia.com"
    dra_mig_class: str = "mig.nvidia.com"
    # Shoal's node pool (`nodepool`): nodes labelled `pool_key=pool_value` and tainted
    # `pool_key=pool_value:NoSchedule`. Shoal allocates DRA devices itself only there;
    # kube-scheduler allocates those of every other DRA node, whose GPUs Shoal leaves
    # alone. `dra_outside_pool`: Shoal allocates on every DRA node (safe only where no
    # other scheduler allocates DRA devices: kube-scheduler does for any pod with a claim).
    pool_key: str = "shoal.dev/pool"
    pool_value: str = "shoal"
    dra_outside_pool: bool = False
    # The scheduler (kube-scheduler's profile) that must leave a preemptor's room while
    # its victims terminate: each victim pod gets a nominee for it (`nominees`). None or
    # "": none.
    nominate_for: str | None = "default-scheduler"
    nominee_hold_s: float = 30.0  # how long a nominee outlives its victim pod
    # Give every multi-worker attempt a Workload and a PodGroup (scheduling.k8s.io/v1beta1,
    # Kubernetes 1.37 with GenericWorkload), so cluster tools see the gang. Off where the
    # API is not served.
    workloads: bool = True
    finished_ttl_s: float | None = 3600.0  # delete finished jobs' objects after; None: keep
    reservation_grace_s: float = 30.0  # an unshared reservation younger than this stays
    request_timeout_s: float = 10.0
    list_page_size: int = 500  # LISTs are read in pages of this many objects
    # Client-side rate limit (token bucket, as client-go's); 0: none. Each bind is one
    # call; Events go through a bucket of their own (as kube-scheduler's event client),
    # so they never slow a bind. The server's priority and fairness (APF) stays the real
    # guard: its 429s are retried after their Retry-After.
    qps: float = 200.0
    burst: int = 400
    # Foreign pods' bindings run on this many threads (one call each, off the loop's
    # thread); 0: bind on the caller's thread, one after another. A bind takes ~0.3 s
    # on a loaded API server (docs/benchmarks.md, issue 9): 16 threads capped Shoal near
    # 60 binds/s there, 48 kept up with 100+ pods/s created.
    bind_workers: int = 48
    # Shoal's own launches (claims, pods, Bindings, Events) run on this many threads,
    # launches of different jobs at once, off the loop's thread (`pods.launchpool`); 0:
    # each on the loop's thread, one after another.
    launch_workers: int = 16
    retry_deadline_s: float = 30.0  # give up a call after retrying this long
    retry_max_delay_s: float = 5.0
    watch_timeout_s: int = 300  # server-side timeout of one watch request
    reconcile_interval_s: float = 2.0
    # A bound worker whose node has not been Ready this long is a failed worker (its
    # attempt is re-placed, without using up backoffLimit); one whose node is gone, at once.
    node_lost_s: float = 300.0
    event_component: str = "shoal-scheduler"

    def __post_init__(self) -> None:
        if not LABEL_KEY.match(self.pool_key) or not LABEL_VALUE.match(self.pool_value):
            raise ValueError(
                f"nodePool {self.pool_key}={self.pool_value} is not a label key and value "
                "(e.g. shoal.dev/pool=shoal)"
            )
        if self.share_cdi_kind is not None and not CDI_KIND.match(self.share_cdi_kind):
            raise ValueError(
                f"shareCdiKind {self.share_cdi_kind!r} is not a CDI kind (vendor/class, "
                "e.g. nvidia.com/gpu or runtime.nvidia.com/gpu)"
            )

    def namespace_of(self, spec: JobSpec) -> str:
        """Where a job's pods, Service and claims are made."""
        return spec.namespace or self.namespace

    @property
    def job_namespaces(self) -> tuple[str, ...]:
        """Every namespace Shoal runs jobs in, the jobs namespace first."""
        return (self.namespace, *(n for n in self.team_namespaces if n != self.namespace))

    @property
    def reservation_namespace(self) -> str:
        return self.reserve_namespace or self.namespace

    @property
    def reservation_runtime_class(self) -> str | None:
        return self.reserve_runtime_class or self.runtime_class


def api_client(config: KubeConfig) -> Any:
    """A `kubernetes.client.ApiClient` for `config` (its own urllib3 retries off: the
    backend retries with its own bounded backoff, and must see every failure)."""
    if config.host is not None:
        conf = kubernetes.client.Configuration()
        conf.host = config.host
    else:
        conf = kubernetes.client.Configuration()
        try:
            kubernetes.config.load_incluster_config(client_configuration=conf)  # type: ignore[no-untyped-call]
        except kubernetes.config.ConfigException:
            try:
                kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=config.kubeconfig, client_configuration=conf
                )
            except kubernetes.config.ConfigException as e:
                where = config.kubeconfig or "~/.kube/config (KUBECONFIG unset)"
                raise ValueError(
                    f"no Kubernetes API server to use: not in a pod (no ServiceAccount "
                    f"token), and the kubeconfig {where} gives none ({e}); set KUBECONFIG, "
                    "or SHOAL_KUBE_API_URL, or run `shoal serve` without --backend kubernetes"
                ) from None
    conf.retries = False
    # One pooled connection per thread that may call at once: the binding threads, the
    # watches (pods, nodes, the CR watcher's), the loop, the upkeep and the Events
    # thread. The client's default (5 per CPU: 10 on 2 cores) is below that; urllib3
    # then opens a connection past the pool and drops it after one call, so binds
    # paid a new TLS handshake each.
    conf.connection_pool_maxsize = max(
        conf.connection_pool_maxsize or 0,
        config.bind_workers + config.launch_workers + POOL_HEADROOM,
    )
    return kubernetes.client.ApiClient(conf)
