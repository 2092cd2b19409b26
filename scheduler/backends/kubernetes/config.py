"""Settings of the Kubernetes backend, and the construction of the official client.

The Helm chart's ConfigMap maps onto `KubeConfig`; `api_client()` builds a
`kubernetes.client.ApiClient` from in-cluster credentials, a kubeconfig, or an explicit
host (tests point it at the fake API server).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kubernetes

SCHEDULER_NAME = "shoal"


def baseline_security_context() -> dict[str, Any]:
    """A container securityContext that Pod Security "baseline" and "restricted" admit
    (except runAsNonRoot, which depends on the image, so it is left to the config)."""
    return {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """Everything the backend needs to know about the cluster it runs on."""

    namespace: str = "shoal-jobs"  # where worker pods, Services and reservations live
    scheduler_name: str = SCHEDULER_NAME
    host: str | None = None  # explicit API server URL; None: in-cluster, then kubeconfig
    kubeconfig: str | None = None
    # Taints Shoal's pods tolerate, as pod `tolerations` entries; tainted nodes whose
    # NoSchedule/NoExecute taints are all tolerated stay schedulable.
    tolerations: Sequence[Mapping[str, str]] = ()
    security_context: Mapping[str, Any] = field(default_factory=baseline_security_context)
    service_account: str | None = None  # for worker pods; None: the namespace default
    reserve_image: str = "ghcr.io/shoal-dev/shoal:latest"  # runs `shoal reserve`
    reserve_service_account: str = "shoal-reserve"  # may patch its own pod
    finished_ttl_s: float | None = 3600.0  # delete finished jobs' objects after; None: keep
    reservation_grace_s: float = 30.0  # an unshared reservation younger than this stays
    request_timeout_s: float = 10.0
    retry_deadline_s: float = 30.0  # give up a call after retrying this long
    retry_max_delay_s: float = 5.0
    watch_timeout_s: int = 300  # server-side timeout of one watch request
    reconcile_interval_s: float = 2.0
    event_component: str = "shoal-scheduler"


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
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=config.kubeconfig, client_configuration=conf
            )
    conf.retries = False
    return kubernetes.client.ApiClient(conf)
