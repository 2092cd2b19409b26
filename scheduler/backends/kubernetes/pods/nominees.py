"""Room kube-scheduler leaves for Shoal's preemptors while their victims terminate.

Shoal preempts, and its victims take their grace period to go; the core keeps their room
for the preemptor, but kube-scheduler sees only pods. It keeps a node's room for a pod
whose `status.nominatedNodeName` names it (for pods of lower or equal priority), yet only
for pods of its own profiles (`responsibleForPod` in its event handlers): a nomination on
Shoal's pods means nothing to it. So each victim pod of a preemption gets a *nominee*: a
pod in the reservations namespace with kube-scheduler's `schedulerName`, a scheduling
gate (never tried, so never bound and its nomination never cleared; a gated pod is still
recorded in kube-scheduler's nominator), the victim's requests, and `nominatedNodeName`
the victim's node. Its PriorityClass is the reservations' (the highest a non-system
class may have), so that every pod kube-scheduler places leaves the room.

Shoal itself does not count nominees (`inventory.is_nominee`; its core counts the
preemptor). A nominee goes once its victim pod has been gone `nominee_hold_s` (the preemptor is
launched by then and its own pods hold the room). On a DRA node kube-scheduler's
nominator holds no device for a nominee (claims are allocated, not nominated): there
the pool's taint keeps its pods off instead (docs/kubernetes.md, "Beside kube-scheduler,
Kueue and KAI").
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.client.api import Kube
from scheduler.backends.kubernetes.client.apierrors import ApiError
from scheduler.backends.kubernetes.config import KubeConfig
from scheduler.backends.kubernetes.view import inventory

log = logging.getLogger(__name__)
Obj = dict[str, Any]
GATE = f"{names.DOMAIN}/nominee"  # never removed: the pod is never scheduled
VICTIM_UID = f"{names.DOMAIN}/victim-uid"
VICTIM = f"{names.DOMAIN}/victim"  # namespace/name, for people reading it


def nominee_pod(victim: Obj, scheduler_name: str, config: KubeConfig) -> Obj | None:
    """The nominee of a bound `victim` pod (None: it holds no room on a node)."""
    if not inventory.holds_resources(victim):
        return None
    meta, node = victim["metadata"], str(victim["spec"]["nodeName"])
    cpu, memory, gpus = inventory.pod_requests(victim)
    requests = {"cpu": f"{cpu}m", "memory": f"{memory}Mi"}
    if gpus:
        requests[inventory.GPU] = str(gpus)
    uid = str(meta.get("uid", ""))
    name = f"shoal-nominee-{hashlib.sha256(uid.encode()).hexdigest()[:12]}"
    spec: Obj = {
        "schedulerName": scheduler_name,
        "schedulingGates": [{"name": GATE}],
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "tolerations": [{"operator": "Exists"}],
        "containers": [
            {
                "name": "hold",
                "image": config.reserve_image,
                "command": ["true"],
                "resources": {"requests": requests, "limits": dict(requests)},
                "securityContext": dict(config.security_context),
            }
        ],
    }
    if config.reserve_priority_class:
        spec["priorityClassName"] = config.reserve_priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": config.reservation_namespace,
            "labels": names.node_pod_labels(names.NOMINEE_COMPONENT, node),
            "annotations": {
                names.NODE: node,
                VICTIM_UID: uid,
                VICTIM: f"{meta.get('namespace', '')}/{meta.get('name', '')}",
            },
        },
        "spec": spec,
    }


class Nominees:
    def __init__(
        self, kube: Kube, config: KubeConfig, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.kube, self.config, self.clock = kube, config, clock
        self._gone_since: dict[str, float] = {}  # nominee name -> when its victim was gone

    def hold(self, victim: Obj) -> None:
        """Make `victim`'s nominee and nominate its node (both idempotent). A failure is
        logged, never raised: the preemption goes on without it."""
        if not self.config.nominate_for:
            return
        pod = nominee_pod(victim, self.config.nominate_for, self.config)
        if pod is None:
            return
        meta = pod["metadata"]
        try:
            try:
                self.kube.create("pods", pod, meta["namespace"])
            except ApiError as e:
                if e.status != 409:
                    raise
            nominated = {"status": {"nominatedNodeName": meta["annotations"][names.NODE]}}
            self.kube.patch("pods/status", meta["name"], nominated, meta["namespace"])
        except ApiError as e:
            log.warning("no nominee for preempted pod %s: %s", meta["annotations"][VICTIM], e)

    def sweep(self, pods: Iterable[Obj]) -> None:
        """Delete the nominees whose victim has been gone `nominee_hold_s` (one pass over the
        pod cache: a victim counts as there while a pod of its uid is cached and holds
        its node)."""
        pods = list(pods)
        holding = {p["metadata"].get("uid") for p in pods if inventory.holds_resources(p)}
        now = self.clock()
        seen = set()
        for p in pods:
            if not inventory.is_nominee(p) or p["metadata"].get("deletionTimestamp"):
                continue
            name = p["metadata"]["name"]
            seen.add(name)
            if names.annotations_of(p).get(VICTIM_UID) in holding:
                self._gone_since.pop(name, None)
                continue
            since = self._gone_since.setdefault(name, now)
            if now - since >= self.config.nominee_hold_s:
                self.kube.delete("pods", name, p["metadata"]["namespace"])
                self._gone_since.pop(name, None)
        self._gone_since = {k: v for k, v in self._gone_since.items() if k in seen}
