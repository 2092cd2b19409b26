"""A small, stateful fake Kubernetes API server for the kubernetes backend's tests.

The real `kubernetes` client talks HTTP to it on a loopback port. It keeps objects per
resource and namespace, assigns uids and one global resourceVersion counter (as etcd
does), and serves list/get/create/replace/patch/delete, watch streams with 410 Expired
for compacted versions, the pods/binding, pods/status and pods/eviction subresources
(an eviction honours PodDisruptionBudgets as kube-apiserver does, `fakeevict`), leases
and events. Every object a client writes is validated against the official schemas with
kubernetes-validate (strict); failures are answered 422 and recorded in `invalid`.
`inject()` makes the next N matching requests fail (a status code, or a stall longer
than the client's timeout) to test retries and recovery.
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kubernetes_validate

from . import selectors

Obj = dict[str, Any]

# resource -> (kind, apiVersion, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "nodes": ("Node", "v1", False),
    "pods": ("Pod", "v1", True),
    "services": ("Service", "v1", True),
    "configmaps": ("ConfigMap", "v1", True),
    "events": ("Event", "v1", True),
    "leases": ("Lease", "coordination.k8s.io/v1", True),
    "trainingjobs": ("TrainingJob", "shoal.dev/v1alpha1", True),
    "queues": ("Queue", "shoal.dev/v1alpha1", False),
    "workloads": ("Workload", "scheduling.k8s.io/v1beta1", True),
    "podgroups": ("PodGroup", "scheduling.k8s.io/v1beta1", True),
    "resourceslices": ("ResourceSlice", "resource.k8s.io/v1", False),
    "deviceclasses": ("DeviceClass", "resource.k8s.io/v1", False),
    "resourceclaims": ("ResourceClaim", "resource.k8s.io/v1", True),
    "poddisruptionbudgets": ("PodDisruptionBudget", "policy/v1", True),
    "persistentvolumeclaims": ("PersistentVolumeClaim", "v1", True),
    "persistentvolumes": ("PersistentVolume", "v1", False),
    "storageclasses": ("StorageClass", "storage.k8s.io/v1", False),
}
CUSTOM = {"trainingjobs", "queues"}
VALIDATED = {
    "Node",
    "Pod",
    "Service",
    "ConfigMap",
    "Event",
    "Lease",
    "Binding",
    "Workload",
    "PodGroup",
    "ResourceSlice",
    "DeviceClass",
    "ResourceClaim",
    "PodDisruptionBudget",
    "Eviction",
}
K8S_VERSION = "1.37"


class ApiError(Exception):
    def __init__(
        self, code: int, reason: str, message: str, causes: list[Obj] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.causes = causes

    def status(self) -> Obj:
        out: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "code": self.code,
            "reason": self.reason,
            "message": self.message,
        }
        if self.causes:
            out["details"] = {"causes": self.causes}
        return out


@dataclass
class Fault:
    remaining: int
    status: int = 500
    stall_s: float = 0.0  # > 0: sleep this long, then answer normally (a timeout)
    path: str = ""  # only requests whose path contains this
    method: str = ""
    skip: int = 0  # let this many matching requests through first
    retry_after: str = ""  # a Retry-After header on the error


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (strategic merge is treated the same)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class FakeKube:
    """The state plus the HTTP server. Use as a context manager or call start()/stop()."""

    def __init__(self, history: int = 10_000) -> None:
        self.lock = threading.Condition()
        self.store: dict[str, dict[tuple[str, str], Obj]] = {r: {} for r in RESOURCES}
        self.log: dict[str, list[tuple[int, str, Obj]]] = {r: [] for r in RESOURCES}
        self.compacted: dict[str, int] = dict.fromkeys(RESOURCES, 0)
        self.rv = 100
        self.history = history
        self.faults: list[Fault] = []
        # Admission: (resource, verb, body) -> an error to answer, or None (a webhook,
        # a ResourceQuota or RBAC refusing one write); see `deny`.
        self.admission: list[Callable[[str, str, Obj], ApiError | None]] = []
        self.invalid: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.creates: dict[tuple[str, str, str], int] = {}
        self.bindings: dict[tuple[str, str], int] = {}
        self.deletions: list[tuple[str, str, str, int | None]] = []
        self.evictions: list[tuple[str, str, int]] = []  # (ns, pod, HTTP status answered)
        # True: a pod deleted with a grace period > 0 only gets its deletionTimestamp, as
        # on a real cluster, and stays until `remove` (the kubelet saying it is gone).
        self.graceful_pod_deletes = False
        self.closing = False
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        # Clients that time out hang up mid-request; that is expected here, not news.
        self.httpd.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> FakeKube:
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.lock:
            self.closing = True
            self.lock.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeKube:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- test helpers (direct state access, as a kubelet or controller would) ----

    def inject(
        self,
        count: int,
        status: int = 500,
        *,
        stall_s: float = 0.0,
        path: str = "",
        method: str = "",
        skip: int = 0,
        retry_after: str = "",
    ) -> None:
        with self.lock:
            self.faults.append(Fault(count, status, stall_s, path, method, skip, retry_after))

    def deny(
        self,
        resource: str,
        when: Callable[[Obj], bool],
        code: int = 403,
        message: str = 'admission webhook "deny.example.com" denied the request',
        verb: str = "create",
    ) -> Callable[[str, str, Obj], ApiError | None]:
        """Refuse every `verb` ("create", or "bind" for pods/binding) of `resource` whose
        body satisfies `when`, as a webhook, quota or RBAC would. Returns the rule
        (remove it from `admission` to lift the refusal)."""
        reasons = {403: "Forbidden", 409: "Conflict", 422: "Invalid"}

        def rule(res: str, v: str, body: Obj) -> ApiError | None:
            if res == resource and v == verb and when(body):
                return ApiError(code, reasons.get(code, "BadRequest"), message)
            return None

        with self.lock:
            self.admission.append(rule)
        return rule

    def admit(self, resource: str, verb: str, body: Obj) -> None:
        with self.lock:
            rules = list(self.admission)
        for rule in rules:
            if (err := rule(resource, verb, body)) is not None:
                raise err

    def compact(self) -> None:
        """Forget all watch history: a watch from any version so far answers 410 Expired
        (as after an etcd compaction); watches already streaming go on."""
        with self.lock:
            for r in RESOURCES:
                self.log[r].clear()
                self.compacted[r] = self.rv + 1

    def put(self, resource: str, obj: Obj) -> Obj:
        """Create or overwrite an object without validation (fixtures: nodes, foreign pods)."""
        with self.lock:
            ns = obj["metadata"].get("namespace", "") if RESOURCES[resource][2] else ""
            key = (ns, obj["metadata"]["name"])
            kind = "MODIFIED" if key in self.store[resource] else "ADDED"
            return self._commit(resource, key, copy.deepcopy(obj), kind)

    def get(self, resource: str, name: str, namespace: str = "") -> Obj | None:
        with self.lock:
            obj = self.store[resource].get((namespace, name))
            return copy.deepcopy(obj) if obj else None

    def obj(self, resource: str, name: str, namespace: str = "") -> Obj:
        """The object, which must exist."""
        found = self.get(resource, name, namespace)
        assert found is not None, f"{resource} {namespace}/{name} does not exist"
        return found

    def objects(self, resource: str, namespace: str | None = None) -> list[Obj]:
        with self.lock:
            return [
                copy.deepcopy(o)
                for (ns, _), o in sorted(self.store[resource].items())
                if namespace is None or ns == namespace
            ]

    def update(self, resource: str, name: str, namespace: str, patch: Obj) -> Obj:
        """Merge-patch an object as a kubelet or controller would (status, conditions)."""
        with self.lock:
            key = (namespace, name)
            obj = merge_patch(self.store[resource][key], patch)
            return self._commit(resource, key, obj, "MODIFIED")

    def remove(self, resource: str, name: str, namespace: str = "") -> None:
        with self.lock:
            obj = self.store[resource].pop((namespace, name))
            self._record(resource, "DELETED", obj)

    # ---- internals ----

    def _commit(self, resource: str, key: tuple[str, str], obj: Obj, kind: str) -> Obj:
        kind_name, api_version, namespaced = RESOURCES[resource]
        obj.setdefault("kind", kind_name)
        obj.setdefault("apiVersion", api_version)
        meta = obj.setdefault("metadata", {})
        if namespaced:
            meta["namespace"] = key[0]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        if resource in CUSTOM:  # the API server counts spec changes of custom resources
            prev = self.store[resource].get(key)
            gen = int((prev or {}).get("metadata", {}).get("generation") or 0)
            meta["generation"] = gen + (prev is None or prev.get("spec") != obj.get("spec"))
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        self.store[resource][key] = obj
        self._record(resource, kind, obj)
        return copy.deepcopy(obj)

    def _record(self, resource: str, kind: str, obj: Obj) -> None:
        if kind == "DELETED":
            self.rv += 1
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = str(self.rv)
        log = self.log[resource]
        log.append((self.rv, kind, copy.deepcopy(obj)))
        if len(log) > self.history:
            self.compacted[resource] = log.pop(0)[0]
        self.lock.notify_all()

    def validate(self, obj: Obj) -> None:
        if obj.get("kind") not in VALIDATED:
            return
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except Exception as e:  # ValidationError or SchemaNotFoundError
            msg = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}: {e}"
            self.invalid.append(msg)
            raise ApiError(422, "Invalid", msg) from None

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for f in self.faults:
                if f.remaining > 0 and f.path in path and f.method in ("", method):
                    if f.skip > 0:
                        f.skip -= 1
                        continue
                    f.remaining -= 1
                    return f
            return None

    def watch(self, resource: str, ns: str | None, q: dict[str, str]) -> Iterator[Obj]:
        """Yield watch events after `resourceVersion` until timeoutSeconds or shutdown."""
        deadline = time.monotonic() + float(q.get("timeoutSeconds", "30"))
        since = q.get("resourceVersion", "")
        with self.lock:
            if since in ("", "0"):
                for (ons, _), o in sorted(self.store[resource].items()):
                    if self._matches(o, ons, ns, q):
                        yield {"type": "ADDED", "object": copy.deepcopy(o)}
                pos = self.rv
            else:
                pos = int(since)
                if pos < self.compacted[resource]:
                    err = ApiError(410, "Expired", f"too old resource version: {pos}")
                    yield {"type": "ERROR", "object": err.status()}
                    return
            while not self.closing and time.monotonic() < deadline:
                for rv, kind, o in self.log[resource]:
                    if rv > pos and self._matches(o, o["metadata"].get("namespace", ""), ns, q):
                        yield {"type": kind, "object": copy.deepcopy(o)}
                if self.log[resource]:
                    pos = max(pos, self.log[resource][-1][0])
                self.lock.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic())))

    @staticmethod
    def _matches(o: Obj, ons: str, ns: str | None, q: dict[str, str]) -> bool:
        if ns is not None and ons != ns:
            return False
        labels = o.get("metadata", {}).get("labels") or {}
        return selectors.labels_match(q.get("labelSelector", ""), labels) and (
            selectors.fields_match(q.get("fieldSelector", ""), o)
        )


def _handler(kube: FakeKube) -> type[BaseHTTPRequestHandler]:
    from . import fakeroutes

    class Handler(fakeroutes.Routes):
        server_state = kube

    return Handler
