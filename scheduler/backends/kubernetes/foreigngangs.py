"""Foreign pods that belong to a PodGroup (scheduling.k8s.io/v1beta1): placed whole.

Pods someone else made with `schedulerName: shoal` and `spec.schedulingGroup` name a
PodGroup; with a gang policy of `minCount` N, kube-scheduler would bind none of them until
N can be bound together. Shoal does the same: the waiting pods of one group are one job
(`podgroup:<namespace>/<name>`) of N workers for the scheduling core, which places all N
or none; each pod is then bound on its own (and adopted as its own single-worker job, as
any foreign pod). Until N pods wait, the group waits, saying how many it has. A group
with a basic policy (no gang) is not a gang: its pods are placed one by one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace

from scheduler.backends.kubernetes.api import ApiError, Kube
from scheduler.backends.kubernetes.status import ForeignPod
from scheduler.model import JobRequest, NodeRules, WorkerPlacement
from scheduler.placement import eligible

PREFIX = "podgroup:"


def group_of(pod: ForeignPod) -> str:
    """`namespace/name` of the PodGroup the pod names ("" for none)."""
    return f"{pod.namespace}/{pod.group}" if pod.group else ""


@dataclass(frozen=True)
class ForeignGang:
    key: str  # namespace/name of the PodGroup
    pods: tuple[ForeignPod, ...]  # waiting, by name: worker i is pods[i]
    min_count: int
    blocked: str = ""  # why it cannot be placed yet

    @property
    def job_id(self) -> str:
        return f"{PREFIX}{self.key}"

    def to_job_request(self) -> JobRequest:
        """One job of `min_count` workers, each as large as the largest pod asks (the
        pods of a gang are alike as a rule; the largest keeps placement safe if not)."""
        first = self.pods[0]
        rules = first.rules
        for p in self.pods[1:]:
            rules = eligible.also(rules, p.rules)
        if self.blocked:
            rules = eligible.also(rules, NodeRules(blocked=self.blocked))
        return JobRequest(
            id=self.job_id,
            queue=first.queue,
            workers=self.min_count,
            gpu=max(p.gpu for p in self.pods),
            gpu_memory_mib=max((p.gpu_memory_mib or 0 for p in self.pods), default=0) or None,
            cpu_milli=max(p.cpu_milli for p in self.pods),
            memory_mib=max(p.memory_mib for p in self.pods),
            nodes=rules,
        )

    def member(self, placement: WorkerPlacement) -> tuple[ForeignPod, WorkerPlacement] | None:
        """The pod that is worker `placement.worker`, with its placement as one pod's."""
        if placement.worker >= len(self.pods):
            return None
        return self.pods[placement.worker], replace(placement, worker=0)


class Gangs:
    """Groups waiting foreign pods by PodGroup; reads each group's policy once."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._min: dict[str, int] = {}  # PodGroup key -> gang minCount (0: basic, no gang)
        self._lock = threading.Lock()

    def split(self, pods: Iterable[ForeignPod]) -> tuple[list[ForeignPod], list[ForeignGang]]:
        """(pods placed one by one, gangs). A pod whose PodGroup is not there (yet) waits
        for it, as kube-scheduler's pods do."""
        single: list[ForeignPod] = []
        groups: dict[str, list[ForeignPod]] = {}
        for p in pods:
            key = group_of(p)
            if key and self._min_count(key) != 0:
                groups.setdefault(key, []).append(p)
            else:
                single.append(p)
        gangs = []
        for key, members in sorted(groups.items()):
            need = self._min_count(key)
            members.sort(key=lambda p: p.name)
            if need is None:
                why, need = f"PodGroup {key} is not there", len(members)
            else:
                why = (
                    "" if len(members) >= need else f"PodGroup {key}: {len(members)} of {need} pods"
                )
            gangs.append(ForeignGang(key, tuple(members[:need]), need, why))
        return single, gangs

    def _min_count(self, key: str) -> int | None:
        """The gang's minCount, 0 for a basic PodGroup, None while it is not there."""
        with self._lock:
            if key in self._min:
                return self._min[key]
        namespace, name = key.split("/", 1)
        try:
            group = self.kube.get("podgroups", name, namespace)
        except ApiError:
            group = None
        if group is None:
            return None
        gang = ((group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang")
        count = max(1, int(gang.get("minCount", 1))) if gang is not None else 0
        with self._lock:  # its policy does not change: read once
            self._min[key] = count
        return count
