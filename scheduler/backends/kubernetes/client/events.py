"""Kubernetes Events (core/v1) for what Shoal does to a job: launches, bindings,
preemptions, failures. `kubectl describe pod` and `kubectl get events` show them.

Event names are deterministic per (object, reason), so a scheduler that restarts and
reports the same thing again gets 409 AlreadyExists instead of a duplicate. Events are
best effort: a failure to record one is logged, never raised.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from typing import Any

from scheduler.backends.kubernetes.client.api import Kube
from scheduler.backends.kubernetes.client.apierrors import ApiError

log = logging.getLogger(__name__)
Obj = dict[str, Any]
NORMAL, WARNING = "Normal", "Warning"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def reference(obj: Obj) -> Obj:
    meta = obj["metadata"]
    ref = {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj.get("kind", "Pod"),
        "name": meta["name"],
        "namespace": meta.get("namespace", ""),
    }
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    return ref


class Recorder:
    def __init__(self, kube: Kube, component: str, instance: str = "") -> None:
        self.kube, self.component, self.instance = kube, component, instance or component

    def emit(self, obj: Obj, reason: str, message: str, type_: str = NORMAL, key: str = "") -> None:
        """Record `reason` on `obj` once (per `key`, when one reason can recur)."""
        ref = reference(obj)
        suffix = hashlib.sha256(f"{reason}/{key}".encode()).hexdigest()[:8]
        now = _now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{ref['name']}.{suffix}", "namespace": ref["namespace"]},
            "involvedObject": ref,
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.kube.create("events", event, ref["namespace"])
        except ApiError as e:
            if e.status != 409:
                log.warning("could not record event %s on %s: %s", reason, ref["name"], e)
