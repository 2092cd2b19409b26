"""A narrow, dict-in dict-out seam over the official client, with bounded retries.

Everything else in the backend talks to the cluster through `Kube`. Objects are plain
JSON dicts both ways (`_preload_content=False`), so the backend never depends on the
generated models' deserialisation. Transient failures (5xx, 429, connection errors,
timeouts) are retried with exponential backoff until `retry_deadline_s`, then raised
as `Unavailable`; other API errors surface at once as `ApiError` with the status code.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import kubernetes
import urllib3

from scheduler.backends.kubernetes.client.apierrors import (
    TRANSIENT,
    ApiError,
    DisruptionBlocked,
    NotLeader,
    TokenBucket,
    Unavailable,
    disruption_cause,
    retry_after_s,
)
from scheduler.backends.kubernetes.client.apierrors import api_error as _error
from scheduler.backends.kubernetes.config import KubeConfig

log = logging.getLogger(__name__)
Obj = dict[str, Any]
T = TypeVar("T")
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"  # lists merge by key (conditions)

# resource -> (API class, method suffix, namespaced)
_RESOURCES: dict[str, tuple[str, str, bool]] = {
    "nodes": ("CoreV1Api", "node", False),
    "nodes/status": ("CoreV1Api", "node_status", False),
    "pods": ("CoreV1Api", "pod", True),
    "pods/status": ("CoreV1Api", "pod_status", True),
    "services": ("CoreV1Api", "service", True),
    "configmaps": ("CoreV1Api", "config_map", True),
    "events": ("CoreV1Api", "event", True),
    "leases": ("CoordinationV1Api", "lease", True),
    "persistentvolumeclaims": ("CoreV1Api", "persistent_volume_claim", True),
    "persistentvolumes": ("CoreV1Api", "persistent_volume", False),
    "storageclasses": ("StorageV1Api", "storage_class", False),
    # DRA (resource.k8s.io/v1) and gangs (scheduling.k8s.io/v1beta1, Kubernetes 1.37)
    "resourceslices": ("ResourceV1Api", "resource_slice", False),
    "deviceclasses": ("ResourceV1Api", "device_class", False),
    "resourceclaims": ("ResourceV1Api", "resource_claim", True),
    "resourceclaims/status": ("ResourceV1Api", "resource_claim_status", True),
    "workloads": ("SchedulingV1beta1Api", "workload", True),
    "podgroups": ("SchedulingV1beta1Api", "pod_group", True),
    "poddisruptionbudgets": ("PolicyV1Api", "pod_disruption_budget", True),
}


_WRITES = frozenset({"create", "replace", "patch", "delete", "bind", "evict"})


class Kube:
    """Calls on the API server; safe to share between threads. Every call takes a token
    from a client-side bucket (`qps`, `burst`); a 429 or 503 with Retry-After waits at
    least that long before the retry."""

    def __init__(self, client: Any, config: KubeConfig) -> None:
        self.client, self.config = client, config
        self._apis: dict[str, Any] = {}
        self.closed = threading.Event()  # set on shutdown: stop retrying
        self.bucket = TokenBucket(config.qps, config.burst) if config.qps > 0 else None
        self.waits: list[float] = []  # the retry delays taken (for tests and debugging)
        # When set: the time.monotonic() at which writes must stop (None: stop now).
        self.fence: Callable[[], float | None] | None = None

    def fork(self) -> Kube:
        """A `Kube` on the same client, shutdown and leadership fence, with a token bucket
        of its own (for Events: best-effort writes must not use up the binds' rate)."""
        other = Kube(self.client, self.config)
        other.closed = self.closed
        other.fence = lambda: self.fence() if self.fence is not None else float("inf")
        return other

    def _api(self, cls: str) -> Any:
        if cls not in self._apis:
            self._apis[cls] = getattr(kubernetes.client, cls)(self.client)
        return self._apis[cls]

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """`fn()` with backoff on transient failures, bounded by `retry_deadline_s`."""
        deadline = time.monotonic() + self.config.retry_deadline_s
        if self.fence is not None and what.split(" ", 1)[0] in _WRITES:
            # Leadership fencing: no write starts, and no retry waits, past the renew
            # deadline, so a cycle in progress cannot write after a follower took over.
            until = self.fence()
            if until is None or time.monotonic() >= until:
                raise NotLeader(503, "NotLeader", f"{what}: not the leader")
            deadline = min(deadline, until)
        delay = 0.05
        while True:
            if self.bucket is not None:
                self.bucket.take()
            told: float | None = None
            try:
                return fn()
            except kubernetes.client.ApiException as e:
                err = _error(e)
                if err.status not in TRANSIENT:
                    raise err from None
                last: str = str(err)
                told = retry_after_s(e)
            except (urllib3.exceptions.HTTPError, OSError) as e:
                last = f"{type(e).__name__}: {e}"
            wait = delay * (0.5 + random.random() / 2) if told is None else told
            if time.monotonic() + wait > deadline or self.closed.is_set():
                raise Unavailable(503, "Unavailable", f"{what}: {last}")
            log.warning("%s failed (%s); retrying in %.2fs", what, last, wait)
            self.waits.append(wait)
            self.closed.wait(wait)
            delay = min(delay * 2, self.config.retry_max_delay_s)

    def _do(self, verb: str, resource: str, namespace: str | None, **kw: Any) -> Obj:
        cls, suffix, namespaced = _RESOURCES[resource]
        scope = "namespaced_" if namespaced and namespace is not None else ""
        if verb == "list" and namespaced and namespace is None:
            scope, suffix = "", f"{suffix}_for_all_namespaces"
        fn = getattr(self._api(cls), f"{verb}_{scope}{suffix}")
        if scope:
            kw["namespace"] = namespace
        kw.update(_preload_content=False, _request_timeout=self.config.request_timeout_s)

        def once() -> Obj:
            resp = fn(**kw)
            return json.loads(resp.data) if resp.data else {}

        return self._call(f"{verb} {resource} {kw.get('name', '')}".strip(), once)

    # ---- verbs ----

    def list(
        self, resource: str, namespace: str | None = None, *, labels: str = "", fields: str = ""
    ) -> tuple[list[Obj], str]:
        """(items, resourceVersion of the list), read in pages of `list_page_size`
        (`limit`/`continue`: one consistent snapshot, served in parts, so a 10,000-pod
        list neither times out nor holds the API server's memory at once)."""
        items: list[Obj] = []
        token: str | None = None
        rv = ""
        while True:
            out = self._do(
                "list",
                resource,
                namespace,
                label_selector=labels or None,
                field_selector=fields or None,
                limit=self.config.list_page_size,
                _continue=token,
            )
            items.extend(out.get("items") or [])
            meta = out.get("metadata") or {}
            rv = rv or str(meta.get("resourceVersion", ""))
            token = meta.get("continue") or None
            if not token:
                return items, rv

    def get(self, resource: str, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return self._do("read", resource, namespace, name=name)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def create(self, resource: str, body: Obj, namespace: str | None = None) -> Obj:
        """Raises ApiError(409) when the object exists."""
        return self._do("create", resource, namespace, body=body)

    def replace(self, resource: str, name: str, body: Obj, namespace: str | None = None) -> Obj:
        """Raises ApiError(409) when `body`'s resourceVersion is stale."""
        return self._do("replace", resource, namespace, name=name, body=body)

    def patch(
        self,
        resource: str,
        name: str,
        body: Obj,
        namespace: str | None = None,
        content_type: str = MERGE_PATCH,
    ) -> Obj:
        return self._do(
            "patch", resource, namespace, name=name, body=body, _content_type=content_type
        )

    def delete(
        self,
        resource: str,
        name: str,
        namespace: str | None = None,
        grace_period_s: int | None = None,
    ) -> bool:
        """False when it was already gone."""
        try:
            self._do(
                "delete",
                resource,
                namespace,
                name=name,
                grace_period_seconds=grace_period_s,
                propagation_policy="Background",
            )
            return True
        except ApiError as e:
            if e.status == 404:
                return False
            raise

    def bind(
        self,
        namespace: str,
        pod: str,
        node: str,
        uid: str = "",
        annotations: dict[str, str] | None = None,
    ) -> bool:
        """Bind through pods/binding; False when the pod was already bound elsewhere (a
        409 with the pod found bound to another node). `uid` is a precondition, as
        kube-scheduler sends it: a pod deleted and made again under the same name is not
        bound by mistake (409, raised). Any other 409 (a webhook's, a conflict) is raised
        too. `annotations` land on the pod in the same write (the API server merges a
        Binding's annotations into the pod): one call instead of a PATCH and a bind."""
        meta: Obj = {"name": pod, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        api = self._api("CoreV1Api")

        def once() -> None:
            resp = api.create_namespaced_pod_binding(
                pod,
                namespace,
                body,
                _preload_content=False,
                _request_timeout=self.config.request_timeout_s,
            )
            # Read it: an unread answer keeps its connection out of the pool, and every
            # bind then opened a new TLS connection.
            resp.read()
            resp.release_conn()

        try:
            self._call(f"bind pod {pod}", once)
            return True
        except ApiError as e:
            if e.status != 409:
                raise
            live = self.get("pods", pod, namespace)
            bound = live is not None and (live.get("spec") or {}).get("nodeName")
            if bound and live is not None and (not uid or live["metadata"].get("uid") == uid):
                # On the node asked for: a retry whose first try's answer was lost (a
                # timeout on a loaded server) bound it; that is this call's success.
                return bool(bound == node)
            raise

    def evict(self, namespace: str, pod: str, grace_period_s: int, uid: str = "") -> bool:
        """Evict through pods/eviction (policy/v1), so PodDisruptionBudgets are honoured;
        the API server then deletes the pod with `grace_period_s`. False when it was
        already gone. Raises `DisruptionBlocked` when a PDB forbids it now. `uid` is a
        precondition: a pod made again under the same name is not evicted by mistake."""
        options: Obj = {"gracePeriodSeconds": grace_period_s}
        if uid:
            options["preconditions"] = {"uid": uid}
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
            "deleteOptions": options,
        }
        api = self._api("CoreV1Api")

        def once() -> None:
            try:
                resp = api.create_namespaced_pod_eviction(
                    pod,
                    namespace,
                    body,
                    _preload_content=False,
                    _request_timeout=self.config.request_timeout_s,
                )
            except kubernetes.client.ApiException as e:
                cause = disruption_cause(e)
                if cause is None:
                    raise
                raise DisruptionBlocked(_error(e).args[0], cause) from None
            resp.read()
            resp.release_conn()

        try:
            self._call(f"evict pod {pod}", once)
            return True
        except ApiError as e:
            if e.status == 404:
                return False
            raise

    def watch(
        self, resource: str, resource_version: str, namespace: str | None = None
    ) -> Iterator[Obj]:
        """Watch events after `resource_version` (no retries: the reflector relists).
        An expired version arrives as an ERROR event with a 410 Status, or as
        ApiError(410)."""
        cls, suffix, namespaced = _RESOURCES[resource]
        api = self._api(cls)
        if namespaced and namespace is None:
            fn, kw = getattr(api, f"list_{suffix}_for_all_namespaces"), {}
        elif namespaced:
            fn, kw = getattr(api, f"list_namespaced_{suffix}"), {"namespace": namespace}
        else:
            fn, kw = getattr(api, f"list_{suffix}"), {}
        timeout = self.config.watch_timeout_s
        try:
            resp = fn(
                **kw,
                watch=True,
                resource_version=resource_version,
                timeout_seconds=timeout,
                allow_watch_bookmarks=True,
                _preload_content=False,
                _request_timeout=(self.config.request_timeout_s, timeout + 5),
            )
        except kubernetes.client.ApiException as e:
            raise _error(e) from None
        try:
            buf = b""
            for chunk in resp.stream(4096, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            resp.release_conn()
