"""PodDisruptionBudgets, as the Eviction API applies them to the stops Shoal decides.

`Budgets` reads the PDB cache: which budget selects a pod and allows no disruption now,
the fact the core prefers victims by (`KubernetesBackend.disruption_blocked`).
`Evictions` remembers, per pod, an eviction the API server refused (429, a PDB allows no
disruption now): the pod runs on, its job is reported as waiting for that PDB, and the
eviction is tried again after a backoff (2 s doubling to 20 s), not on every cycle.
`WorkerPods.stop_pod` is its one writer; the backend reads both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.client.reflector import Reflector, key_of

Obj = dict[str, Any]
FIRST_RETRY_S, MAX_RETRY_S = 2.0, 20.0


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Does a policy/v1 label selector select these labels? An empty selector selects
    every pod of the namespace; a missing one none (policy/v1's rule)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def budget_name(pdb: Obj) -> str:
    meta = pdb["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def allows_none(pdb: Obj) -> bool:
    """No eviction would pass it now: `disruptionsAllowed` 0, or a spec the disruption
    controller has not processed yet (the API server refuses evictions until it has)."""
    status = pdb.get("status") or {}
    seen = int(status.get("observedGeneration") or 0)
    current = seen >= int(pdb["metadata"].get("generation") or 0)
    return not current or int(status.get("disruptionsAllowed") or 0) <= 0


def describe(pdb: Obj) -> str:
    """`ns/name: allows no disruption now (N healthy, M needed)`, and why the disruption
    controller says so where it failed (`held_by`)."""
    status = pdb.get("status") or {}
    healthy, needed = status.get("currentHealthy"), status.get("desiredHealthy")
    numbers = f" ({healthy} healthy, {needed} needed)" if healthy is not None else ""
    return f"{budget_name(pdb)}: allows no disruption now{numbers}{held_by(pdb)}"


def held_by(pdb: Obj) -> str:
    """`; SyncFailed: …` when the disruption controller could not judge the budget (its
    `DisruptionAllowed` condition): e.g. `maxUnavailable` over pods whose controller has
    no scale subresource (a TrainingJob's), which fails safe, allowing none for ever."""
    for c in (pdb.get("status") or {}).get("conditions") or []:
        if c.get("type") == "DisruptionAllowed" and c.get("reason") == "SyncFailed":
            return f"; SyncFailed: {c.get('message', '')}"
    return ""


class Budgets:
    """The PDB cache (a list-and-watch `Reflector`, all namespaces)."""

    def __init__(self, cache: Reflector) -> None:
        self.cache = cache

    def holding(self) -> bool:
        """Does any budget allow no disruption now?"""
        return any(allows_none(p) for p in self.cache.items())

    def blocking(self, pods: Iterable[tuple[str, Obj]]) -> dict[str, str]:
        """job id -> `describe` of a PDB that selects one of its pods (job id, pod) and
        allows no disruption now. Only budgets that block are matched: few, mostly none."""
        strict = [p for p in self.cache.items() if allows_none(p)]
        if not strict:
            return {}
        out: dict[str, str] = {}
        for job_id, pod in pods:
            if job_id in out or pod["metadata"].get("deletionTimestamp"):
                continue
            ns, labels = pod["metadata"].get("namespace", ""), names.labels_of(pod)
            for pdb in strict:
                meta = pdb["metadata"]
                if meta.get("namespace") == ns and selects(
                    (pdb.get("spec") or {}).get("selector"), labels
                ):
                    out[job_id] = describe(pdb)
                    break
        return out


@dataclass
class Refusal:
    job_id: str
    message: str  # "ns/name: <the API server's cause>"
    retry_at: float
    delay_s: float


class Evictions:
    """Refused evictions, by pod (namespace/name), until the pod goes or one passes."""

    def __init__(
        self, budgets: Budgets | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.budgets, self.clock = budgets, clock
        self._refused: dict[str, Refusal] = {}
        self._lock = threading.Lock()

    def refused(self, pod: Obj, job_id: str, cause: str) -> Refusal:
        """Record a refusal of `pod`'s eviction (the API server's `cause`); the next try
        waits twice as long as the last, up to `MAX_RETRY_S`."""
        key = key_of(pod)
        with self._lock:
            last = self._refused.get(key)
            delay = min(MAX_RETRY_S, last.delay_s * 2) if last else FIRST_RETRY_S
            r = Refusal(job_id, self._name(pod, cause), self.clock() + delay, delay)
            self._refused[key] = r
            return r

    def passed(self, pod: Obj) -> None:
        with self._lock:
            self._refused.pop(key_of(pod), None)

    def any(self) -> bool:
        with self._lock:
            return bool(self._refused)

    def resting(self, pod: Obj) -> bool:
        """Refused, and not to be tried again yet."""
        with self._lock:
            r = self._refused.get(key_of(pod))
            return r is not None and self.clock() < r.retry_at

    def blocked(self, alive: Callable[[str], bool]) -> dict[str, str]:
        """job id -> why its stop waits, for pods still `alive` (by key); the others'
        refusals are forgotten."""
        with self._lock:
            for key in [k for k in self._refused if not alive(k)]:
                del self._refused[key]
            return {r.job_id: r.message for r in self._refused.values()}

    def _name(self, pod: Obj, cause: str) -> str:
        """The refusing PDB's `ns/name` (from the cache) before the API server's words."""
        if self.budgets is not None:
            ns, labels = pod["metadata"].get("namespace", ""), names.labels_of(pod)
            for pdb in self.budgets.cache.items():
                if pdb["metadata"].get("namespace") == ns and selects(
                    (pdb.get("spec") or {}).get("selector"), labels
                ):
                    return f"{budget_name(pdb)}: {cause}{held_by(pdb)}"
        return cause
