"""Foreign pods that belong to a PodGroup (scheduling.k8s.io/v1beta1): placed whole.

Pods someone else made with `schedulerName: shoal` and `spec.schedulingGroup` name a
PodGroup; with a gang policy of `minCount` N, kube-scheduler binds none of them until N
can be bound together, counting the members already placed (assigned or assumed) toward
N. Shoal does the same: with P members placed, N - P waiting pods of the group are one job
(`podgroup:<namespace>/<name>`) for the scheduling core, which places all of them or none;
each pod is then bound on its own (and adopted as its own single-worker job, as any
foreign pod). Until enough pods wait, the group waits, saying how many it has. Once P
reaches N, further members (a third pod of a group of minCount 2, the replacement of a
member a Job controller deleted) are placed one by one. A group with a basic policy (no
gang) is not a gang: its pods are placed one by one.

Topology (`spec.schedulingConstraints.topology`, alpha in 1.37): a member joining placed
members goes to their domain (the node label's value); a new gang that asks one domain
waits with a reason, since the core does not choose a domain for a whole gang.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from scheduler.backends.kubernetes.client.api import Kube
from scheduler.backends.kubernetes.client.apierrors import ApiError
from scheduler.backends.kubernetes.view.status import ForeignPod
from scheduler.model import JobRequest, NodeRules, Requirement, WorkerPlacement
from scheduler.placement import eligible

PREFIX = "podgroup:"
# minCount may change (a workload scaled); a group's policy is read again this often.
POLICY_TTL_S = 30.0
Placed = Mapping[str, Mapping[str, int]]  # PodGroup key -> node -> members placed there


def group_of(pod: ForeignPod) -> str:
    """`namespace/name` of the PodGroup the pod names ("" for none)."""
    return f"{pod.namespace}/{pod.group}" if pod.group else ""


@dataclass(frozen=True)
class Policy:
    min_count: int  # 0: basic, no gang
    topology: str = ""  # the node label all members share ("": none)


@dataclass(frozen=True)
class ForeignGang:
    key: str  # namespace/name of the PodGroup
    pods: tuple[ForeignPod, ...]  # waiting, by name: worker i is pods[i]
    workers: int  # how many the gang places now: minCount less the members placed
    blocked: str = ""  # why it cannot be placed yet

    @property
    def job_id(self) -> str:
        return f"{PREFIX}{self.key}"

    def to_job_request(self) -> JobRequest:
        """One job of `workers` workers, each as large as the largest pod asks (the
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
            workers=self.workers,
            gpu=max(p.gpu for p in self.pods),
            gpu_memory_mib=max((p.gpu_memory_mib or 0 for p in self.pods), default=0) or None,
            cpu_milli=max(p.cpu_milli for p in self.pods),
            memory_mib=max(p.memory_mib for p in self.pods),
            priority=max(p.priority for p in self.pods),
            submitted_at=min(p.created_at for p in self.pods),
            nodes=rules,
        )

    def member(self, placement: WorkerPlacement) -> tuple[ForeignPod, WorkerPlacement] | None:
        """The pod that is worker `placement.worker`, with its placement as one pod's."""
        if placement.worker >= len(self.pods):
            return None
        return self.pods[placement.worker], replace(placement, worker=0)


class Gangs:
    """Groups waiting foreign pods by PodGroup; reads each group's policy (every
    `POLICY_TTL_S`) and its placed members' nodes' labels (`nodes`: name -> Node)."""

    def __init__(self, kube: Kube, nodes: Callable[[str], dict[str, Any] | None]) -> None:
        self.kube, self.nodes = kube, nodes
        self._policy: dict[str, tuple[float, Policy]] = {}  # PodGroup key -> (read at, it)
        self._lock = threading.Lock()

    def split(
        self, pods: Iterable[ForeignPod], placed: Placed
    ) -> tuple[list[ForeignPod], list[ForeignGang]]:
        """(pods placed one by one, gangs). `placed`: the members of each group placed
        already (`podindex.PodIndex.members` and the binds in flight). A pod whose
        PodGroup is not there (yet) waits for it, as kube-scheduler's pods do."""
        single: list[ForeignPod] = []
        groups: dict[str, list[ForeignPod]] = {}
        policies: dict[str, Policy | None] = {}
        for p in pods:
            key = group_of(p)
            if key and key not in policies:
                policies[key] = self._read(key)
            policy = policies.get(key)
            if key and (policy is None or policy.min_count != 0):
                groups.setdefault(key, []).append(p)
            else:
                single.append(p)
        gangs: list[ForeignGang] = []
        for key, members in sorted(groups.items()):
            members.sort(key=lambda p: p.name)
            policy = policies[key]
            if policy is None:
                why = f"PodGroup {key} is not there"
                gangs.append(ForeignGang(key, tuple(members), len(members), why))
                continue
            on = placed.get(key, {})
            domain = self._domain(policy, on)
            members = [replace(p, rules=eligible.also(p.rules, domain)) for p in members]
            single += self._gang(key, policy, members, sum(on.values()), gangs)
        return single, gangs

    def _gang(
        self,
        key: str,
        policy: Policy,
        members: list[ForeignPod],
        placed: int,
        gangs: list[ForeignGang],
    ) -> list[ForeignPod]:
        """Appends the group's gang to `gangs` if its quorum is not met; returns the
        pods placed one by one: all of them once it is met, else those beyond the gang
        (each waiting, with a reason, until the gang is placed)."""
        need = policy.min_count - placed
        if need <= 0:  # quorum met: each further member on its own
            return members
        if len(members) < need:
            why = f"PodGroup {key}: {placed + len(members)} of {policy.min_count} pods" + (
                f" ({placed} placed)" if placed else ""
            )
        elif policy.topology and not placed:
            why = (
                f"PodGroup {key} asks its pods to share one {policy.topology} domain "
                "(schedulingConstraints.topology): Shoal places a gang's members in the "
                "domain of those already placed, but does not choose one for a new gang"
            )
        else:
            why = ""
        gangs.append(ForeignGang(key, tuple(members[:need]), need, why))
        wait = f"PodGroup {key}: waits for its first {policy.min_count} pods to be placed"
        blocked = NodeRules(blocked=wait)
        return [replace(p, rules=eligible.also(p.rules, blocked)) for p in members[need:]]

    def _domain(self, policy: Policy, placed: Mapping[str, int]) -> NodeRules | None:
        """The nodes in the topology domain of the members placed (None: no constraint)."""
        if not policy.topology or not placed:
            return None
        values = set()
        for node in placed:
            obj = self.nodes(node) if node else None
            labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
            if policy.topology in labels:
                values.add(str(labels[policy.topology]))
        req = (
            Requirement(policy.topology, "In", tuple(sorted(values)))
            if values
            else Requirement(policy.topology, "Exists")
        )
        return NodeRules(required=(((req,),),))

    def _read(self, key: str) -> Policy | None:
        """The group's policy; None while it is not there."""
        now = time.monotonic()
        with self._lock:
            hit = self._policy.get(key)
            if hit is not None and now - hit[0] < POLICY_TTL_S:
                return hit[1]
        namespace, name = key.split("/", 1)
        try:
            group = self.kube.get("podgroups", name, namespace)
        except ApiError:
            group = None
        if group is None:
            return None
        spec = group.get("spec") or {}
        gang = (spec.get("schedulingPolicy") or {}).get("gang")
        topology = ((spec.get("schedulingConstraints") or {}).get("topology") or [{}])[0]
        policy = Policy(
            max(1, int(gang.get("minCount", 1))) if gang is not None else 0,
            str(topology.get("key") or ""),
        )
        with self._lock:
            self._policy[key] = (now, policy)
        return policy
