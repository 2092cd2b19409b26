"""What a pod asks of a node, and whether a node's pods leave it room, as kube-scheduler's
NodeResourcesFit and NodePorts filters count them (pure: pod and node objects as dicts).

`requests` is `k8s.io/component-helpers/resource.PodRequests`: the containers' sum, the
restartable init containers (sidecars) beside them, the largest plain init container
with the sidecars started before it if that is larger, pod-level `spec.resources`
requests in place of that for the resources they name (cpu, memory, hugepages-*), then
`spec.overhead`. A limit without a request counts as the request, as the API server
defaults it. `ask` turns that into kube-scheduler's integers (millicores for cpu, every
other quantity rounded up) for every resource NodeResourcesFit checks, with the pod's
host ports. `refusal` is their Filter: NodePorts first (it runs before NodeResourcesFit),
then "Too many pods" and each `Insufficient <resource>`.

Callers: `inventory.pod_requests` (cpu, memory and GPUs for the scheduling core), the
pod index (what every pod holds on its node) and `nodefit` (the nodes a foreign pod
fits). Quantities are read by `scheduler.spec.quantities`, exactly.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from scheduler.spec.quantities import parse_quantity

Obj = dict[str, Any]
Port = tuple[str, str, int]  # (host IP, protocol, host port), as NodePorts sanitizes them
ANY_IP = "0.0.0.0"
PODS = "pods"
GPU = "nvidia.com/gpu"
# What the scheduling core counts itself (scheduler/model.py: Node); the rest is this
# module's to check for foreign pods.
MODELLED = frozenset({"cpu", "memory", GPU})
PORTS_REASON = "didn't have free ports for the requested pod ports"  # NodePorts' ErrReason
_POD_LEVEL = ("cpu", "memory")  # and hugepages-*: what `spec.resources` may request
_OVERCOMMIT = ("cpu", "memory")  # a pod-level limit defaults to the containers' sum


def quantity(value: Any) -> Fraction:
    """A Kubernetes quantity ("500m", "1Gi", 2) as a number; 0 when it is not one (the
    API server admitted the object: only a field of another version could be)."""
    try:
        return parse_quantity(value)
    except (ValueError, TypeError):
        return Fraction(0)


def _container(c: Obj) -> dict[str, Fraction]:
    res = c.get("resources") or {}
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return {str(k): quantity(v) for k, v in merged.items()}


def _add(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, Fraction(0)) + v


def _max(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for k, v in more.items():
        if v > into.get(k, Fraction(0)):
            into[k] = v


def _pod_level_name(name: str) -> bool:
    return name in _POD_LEVEL or name.startswith("hugepages-")


def requests(pod: Obj) -> dict[str, Fraction]:
    """resource -> what the pod requests, as kube-scheduler adds it up (module doc)."""
    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        _add(total, _container(c))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for c in spec.get("initContainers") or []:
        one = _container(c)
        if c.get("restartPolicy") == "Always":  # runs beside the containers to the end
            _add(total, one)
            _add(sidecars, one)
        else:  # runs alone, beside the sidecars started before it
            during = dict(sidecars)
            _add(during, one)
            _max(init_peak, during)
    _max(total, init_peak)
    level = spec.get("resources") or {}
    pod_requests = {
        str(k): quantity(v)
        for k, v in (level.get("requests") or {}).items()
        if _pod_level_name(str(k))
    }
    # The API server's defaulting: a pod-level limit without a request is the request,
    # except for cpu and memory the containers request (their sum is the default then).
    for k, v in (level.get("limits") or {}).items():
        name = str(k)
        summed = name in _OVERCOMMIT and name in total
        if _pod_level_name(name) and name not in pod_requests and not summed:
            pod_requests[name] = quantity(v)
    total.update(pod_requests)  # pod-level requests replace the containers' sum
    _add(total, {str(k): quantity(v) for k, v in (spec.get("overhead") or {}).items()})
    return total


def _counted(name: str) -> bool:
    """A resource NodeResourcesFit checks: cpu, memory, ephemeral-storage and the scalar
    ones (extended `domain/name` resources, hugepages-*, `*kubernetes.io/*`,
    attachable-volumes-*). `pods` is the node's pod count, not a request."""
    if name in ("cpu", "memory", "ephemeral-storage"):
        return True
    if name.startswith(("hugepages-", "attachable-volumes-")):
        return True
    return "/" in name and not name.startswith("requests.")


def units(name: str, amount: Fraction) -> int:
    """kube-scheduler's integer: millicores for cpu (MilliValue), else Value (rounded up)."""
    return math.ceil(amount * 1000 if name == "cpu" else amount)


def host_ports(pod: Obj) -> tuple[Port, ...]:
    """The host ports the pod takes (`schedutil.GetHostPorts`): of its containers and
    restartable init containers; an empty IP binds all (0.0.0.0), the protocol is TCP
    unless named. With `hostNetwork`, a port without `hostPort` takes its containerPort
    (the API server's defaulting)."""
    spec = pod.get("spec") or {}
    host_network = bool(spec.get("hostNetwork"))
    running = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    out: list[Port] = []
    for c in [*running, *(spec.get("containers") or [])]:
        for p in c.get("ports") or []:
            port = p.get("hostPort") or (p.get("containerPort") if host_network else 0)
            if port and int(port) > 0:
                ip, protocol = str(p.get("hostIP") or ANY_IP), str(p.get("protocol") or "TCP")
                out.append((ip, protocol, int(port)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Ask:
    """What one pod takes of a node: its requests in kube-scheduler's units (counted
    resources, non-zero, by name) and its host ports."""

    resources: tuple[tuple[str, int], ...] = ()
    ports: tuple[Port, ...] = ()

    def amount(self, name: str) -> int:
        return next((q for n, q in self.resources if n == name), 0)


def ask(pod: Obj, reqs: Mapping[str, Fraction] | None = None) -> Ask:
    """The pod's `Ask`; `reqs` is its `requests` when the caller has them already."""
    got = requests(pod) if reqs is None else reqs
    resources = sorted(
        (name, n) for name, q in got.items() if _counted(name) and (n := units(name, q))
    )
    return Ask(tuple(resources), host_ports(pod))


def allocatable(node: Obj) -> dict[str, int]:
    """The node's allocatable resources (and `pods`) in kube-scheduler's units."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {
        str(k): units(str(k), quantity(v)) for k, v in alloc.items() if _counted(k) or k == PODS
    }


class Held:
    """What the pods on one node hold: how many, their requests, their host ports
    (by protocol and port, how many pods take each IP)."""

    __slots__ = ("pods", "ports", "resources")

    def __init__(self) -> None:
        self.pods = 0
        self.resources: Counter[str] = Counter()
        self.ports: dict[tuple[str, int], Counter[str]] = {}

    def add(self, a: Ask, sign: int = 1) -> None:
        self.pods += sign
        for name, q in a.resources:
            self.resources[name] += sign * q
        for ip, protocol, port in a.ports:
            ips = self.ports.setdefault((protocol, port), Counter())
            ips[ip] += sign
            if ips[ip] <= 0:
                del ips[ip]
            if not ips:
                del self.ports[(protocol, port)]

    def copy(self) -> Held:
        out = Held()
        out.pods, out.resources = self.pods, Counter(self.resources)
        out.ports = {k: Counter(v) for k, v in self.ports.items()}
        return out

    def empty(self) -> bool:
        return self.pods == 0 and not self.ports and not any(self.resources.values())

    def port_taken(self, want: Port) -> bool:
        """`HostPortInfo.CheckConflict`: 0.0.0.0 conflicts with the same protocol and port
        on any IP; another IP with itself and with 0.0.0.0."""
        ip, protocol, port = want
        ips = self.ports.get((protocol, port))
        if not ips:
            return False
        return ip == ANY_IP or ips[ANY_IP] > 0 or ips[ip] > 0


def refusal(
    a: Ask, alloc: Mapping[str, int], held: Held, skip: Iterable[str] = MODELLED
) -> str | None:
    """Why kube-scheduler would not put a pod asking `a` on a node with `alloc` whose
    pods hold `held` (its words), or None. Resources in `skip` are left out (the
    scheduling core counts them)."""
    if any(held.port_taken(p) for p in a.ports):
        return PORTS_REASON
    why = []
    if held.pods + 1 > alloc.get(PODS, 0):
        why.append("Too many pods")
    skipped = frozenset(skip)
    for name, q in a.resources:
        if name not in skipped and q > alloc.get(name, 0) - held.resources[name]:
            why.append(f"Insufficient {name}")
    return ", ".join(why) or None
