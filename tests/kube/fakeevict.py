"""pods/eviction on the fake API server, as kube-apiserver's EvictionREST answers it.

A pod that is Pending, finished or already being deleted is deleted without a budget
check; otherwise the one PodDisruptionBudget selecting it (two: 500) must allow a
disruption: a spec its controller has not processed yet, or `disruptionsAllowed` 0,
answers 429 with a `DisruptionBudget` cause and leaves the pod alone; else the budget
is decremented, the pod gets its `DisruptionTarget` condition and is deleted with the
Eviction's `deleteOptions.gracePeriodSeconds`. Tests set a budget's status themselves
(no disruption controller runs here).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .fakeapi import ApiError

if TYPE_CHECKING:
    from .fakeapi import FakeKube, Obj

REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """policy/v1: an empty selector selects every pod, a missing one none."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        have, values = labels.get(e["key"]), e.get("values") or []
        ok = {
            "In": have in values,
            "NotIn": have not in values,
            "Exists": have is not None,
            "DoesNotExist": have is None,
        }[e["operator"]]
        if not ok:
            return False
    return True


def evict(
    kube: FakeKube,
    ns: str,
    name: str,
    body: Obj,
    delete: Callable[[str, str, str, int | None], tuple[int, Obj]],
) -> tuple[int, Obj]:
    """Answer one Eviction of pod `ns/name` (under the lock); `delete` deletes."""
    try:
        out = _evict(kube, ns, name, body, delete)
    except ApiError as e:
        kube.evictions.append((ns, name, e.code))
        raise
    kube.evictions.append((ns, name, 201))
    return out


def _evict(
    kube: FakeKube,
    ns: str,
    name: str,
    body: Obj,
    delete: Callable[[str, str, str, int | None], tuple[int, Obj]],
) -> tuple[int, Obj]:
    pod = kube.store["pods"].get((ns, name))
    if pod is None:
        raise ApiError(404, "NotFound", f'pods "{name}" not found')
    options = body.get("deleteOptions") or {}
    want = (options.get("preconditions") or {}).get("uid")
    if want and want != pod["metadata"].get("uid"):
        raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {want}")
    grace = options.get("gracePeriodSeconds")
    grace = None if grace is None else int(grace)
    phase = (pod.get("status") or {}).get("phase", "Pending")
    done = {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
    if phase in ("Pending", "Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
        delete("pods", ns, name, grace)
        return 201, done
    labels = pod["metadata"].get("labels") or {}
    budgets = [
        b
        for (bns, _), b in sorted(kube.store["poddisruptionbudgets"].items())
        if bns == ns and selects((b.get("spec") or {}).get("selector"), labels)
    ]
    if len(budgets) > 1:
        raise ApiError(
            500,
            "InternalError",
            "This pod has more than one PodDisruptionBudget, which the eviction "
            "subresource does not support.",
        )
    if budgets:
        _take(kube, budgets[0], name)
    pod = copy.deepcopy(pod)
    pod.setdefault("status", {}).setdefault("conditions", []).append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        }
    )
    kube._commit("pods", (ns, name), pod, "MODIFIED")
    delete("pods", ns, name, grace)
    return 201, done


def _take(kube: FakeKube, pdb: Obj, pod: str) -> None:
    """Use up one of the budget's disruptions, or refuse as the API server does."""
    meta, status = pdb["metadata"], pdb.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        cause = f"The disruption budget {meta['name']} is still being processed by the server."
        raise ApiError(429, "TooManyRequests", REFUSED, [_cause(cause)])
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed <= 0:
        cause = (
            f"The disruption budget {meta['name']} needs {status.get('desiredHealthy', 0)} "
            f"healthy pods and has {status.get('currentHealthy', 0)} currently"
        )
        raise ApiError(429, "TooManyRequests", REFUSED, [_cause(cause)])
    pdb = copy.deepcopy(pdb)
    pdb["status"] = dict(status, disruptionsAllowed=allowed - 1)
    pdb["status"].setdefault("disruptedPods", {})[pod] = "2026-01-01T00:00:00Z"
    kube._commit("poddisruptionbudgets", (meta["namespace"], meta["name"]), pdb, "MODIFIED")


def _cause(message: str) -> Obj:
    return {"reason": "DisruptionBudget", "message": message}
