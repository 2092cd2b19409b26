"""HTTP routing of the fake API server: paths to verbs on `FakeKube` state.

Paths: `/api/v1/{resource}[/{name}]`, `/api/v1/namespaces/{ns}/{resource}[/{name}[/{sub}]]`
and the same under `/apis/{group}/{version}/`. Responses are JSON; watches stream one
JSON event per line, one per HTTP/1.1 chunk.
"""

from __future__ import annotations

import copy
import json
import socket
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from . import fakeevict
from .fakeapi import RESOURCES, ApiError, merge_patch

if TYPE_CHECKING:
    from .fakeapi import FakeKube, Obj


def parse_path(path: str) -> tuple[str, str | None, str, str]:
    """-> (resource, namespace or None, name, subresource)."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        rest = parts[3:]
    else:
        raise ApiError(404, "NotFound", f"no route {path}")
    ns = None
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        ns, rest = rest[1], rest[2:]
    if not rest or rest[0] not in RESOURCES:
        raise ApiError(404, "NotFound", f"unknown resource in {path}")
    resource, name, sub = rest[0], "", ""
    if len(rest) > 1:
        name = rest[1]
    if len(rest) > 2:
        sub = rest[2]
    return resource, ns, name, sub


class Routes(BaseHTTPRequestHandler):
    server_state: FakeKube
    protocol_version = "HTTP/1.1"  # keep-alive; watches stream chunked, as the real one

    def setup(self) -> None:
        super().setup()
        # Headers and body go out as separate writes: without this, Nagle plus delayed
        # ACKs add 40 ms to every keep-alive request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _send(self, code: int, body: Obj, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n)) if n else None

    def _serve(self, method: str) -> None:
        kube = self.server_state
        url = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        with kube.lock:
            kube.requests.append((method, url.path))
        body = self._body()  # always read it: the connection is kept alive
        fault = kube.take_fault(method, url.path)
        try:
            if fault and fault.stall_s:
                time.sleep(fault.stall_s)
            elif fault:
                raise ApiError(
                    fault.status,
                    "InternalError" if fault.status >= 500 else "Expired",
                    f"injected {fault.status}",
                )
            resource, ns, name, sub = parse_path(url.path)
            if method == "GET" and not name and q.get("watch") in ("true", "1"):
                self._watch(resource, ns, q)
                return
            code, out = self._dispatch(method, resource, ns or "", name, sub, body, q)
            self._send(code, out)
        except ApiError as e:
            extra = {"Retry-After": fault.retry_after} if fault and fault.retry_after else None
            self._send(e.code, e.status(), extra)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _watch(self, resource: str, ns: str | None, q: dict[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in self.server_state.watch(resource, ns, q):
                data = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _dispatch(
        self, method: str, resource: str, ns: str, name: str, sub: str, body: Any, q: dict[str, str]
    ) -> tuple[int, Obj]:
        kube = self.server_state
        kind, api_version, namespaced = RESOURCES[resource]
        ns = ns if namespaced else ""
        store = kube.store[resource]
        with kube.lock:
            if method == "GET" and not name:
                items = [
                    copy.deepcopy(o)
                    for (ons, _), o in sorted(store.items())
                    if kube._matches(o, ons, ns or None, q)
                ]
                meta: Obj = {"resourceVersion": str(kube.rv)}
                if q.get("limit"):  # pagination: `continue` is the offset here
                    start, limit = int(q.get("continue") or 0), int(q["limit"])
                    if start + limit < len(items):
                        meta["continue"] = str(start + limit)
                    items = items[start : start + limit]
                return 200, {
                    "kind": f"{kind}List",
                    "apiVersion": api_version,
                    "metadata": meta,
                    "items": items,
                }
            if method == "POST" and sub == "eviction":
                kube.validate(body)
                return fakeevict.evict(kube, ns, name, body, self._delete)
            if method == "POST" and sub == "binding":
                kube.admit(resource, "bind", kube.store["pods"].get((ns, name)) or body)
                return self._bind(ns, name, body)
            if method == "POST":
                name = body.get("metadata", {}).get("name", "")
                kube.validate(body)
                kube.admit(resource, "create", body)
                if (ns, name) in store:
                    raise ApiError(409, "AlreadyExists", f'{resource} "{name}" already exists')
                body.pop("status", None) if resource != "pods" else None
                if resource == "pods":
                    body.setdefault("status", {"phase": "Pending"})
                key3 = (resource, ns, name)
                kube.creates[key3] = kube.creates.get(key3, 0) + 1
                return 201, kube._commit(resource, (ns, name), body, "ADDED")
            cur = store.get((ns, name))
            if cur is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
            if method == "GET":
                return 200, copy.deepcopy(cur)
            if method == "DELETE":
                grace = q.get("gracePeriodSeconds") or (body or {}).get("gracePeriodSeconds")
                return self._delete(resource, ns, name, None if grace is None else int(grace))
            if method == "PUT":
                new = body
            elif method == "PATCH":
                new = merge_patch(cur, body)
            else:
                raise ApiError(405, "MethodNotAllowed", method)
            want = (body or {}).get("metadata", {}).get("resourceVersion")
            if want and want != cur["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", "the object has been modified")
            if sub == "status":
                new = dict(cur, status=new.get("status", {}))
            else:
                new = dict(new, status=cur["status"]) if "status" in cur else new
            for k in ("uid", "creationTimestamp"):
                new.setdefault("metadata", {})[k] = cur["metadata"][k]
            check = copy.deepcopy(new)
            check["metadata"].pop("resourceVersion", None)
            kube.validate(check)
            return 200, kube._commit(resource, (ns, name), new, "MODIFIED")

    def _delete(self, resource: str, ns: str, name: str, grace: int | None) -> tuple[int, Obj]:
        """Delete an object that exists (under the lock); a pod, with
        `graceful_pod_deletes`, only gets its deletionTimestamp."""
        kube = self.server_state
        cur = kube.store[resource][(ns, name)]
        kube.deletions.append((resource, ns, name, grace))
        if resource == "pods" and kube.graceful_pod_deletes and (grace is None or grace > 0):
            if not cur["metadata"].get("deletionTimestamp"):
                cur = copy.deepcopy(cur)
                cur["metadata"]["deletionTimestamp"] = time.strftime(
                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime()
                )
                cur["metadata"]["deletionGracePeriodSeconds"] = grace if grace is not None else 30
                return 200, kube._commit(resource, (ns, name), cur, "MODIFIED")
            return 200, copy.deepcopy(cur)
        kube.remove(resource, name, ns)
        return 200, copy.deepcopy(cur)

    def _bind(self, ns: str, name: str, body: Obj) -> tuple[int, Obj]:
        kube = self.server_state
        kube.validate(body)
        pod = kube.store["pods"].get((ns, name))
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        want = (body.get("metadata") or {}).get("uid")
        if want and want != pod["metadata"].get("uid"):
            raise ApiError(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {want}, "
                f"UID in object meta: {pod['metadata'].get('uid')}",
            )
        if pod["spec"].get("nodeName"):
            raise ApiError(
                409, "Conflict", f"pod {name} is already assigned to node {pod['spec']['nodeName']}"
            )
        node = body["target"]["name"]
        pod = copy.deepcopy(pod)
        pod["spec"]["nodeName"] = node
        # As kube-apiserver's BindingREST: the Binding's annotations are merged into the pod.
        extra = (body.get("metadata") or {}).get("annotations") or {}
        if extra:
            pod["metadata"].setdefault("annotations", {}).update(extra)
        pod.setdefault("status", {}).setdefault("conditions", []).append(
            {"type": "PodScheduled", "status": "True"}
        )
        kube.bindings[(ns, name)] = kube.bindings.get((ns, name), 0) + 1
        kube._commit("pods", (ns, name), pod, "MODIFIED")
        return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
