"""A user's ResourceClaims against one node's devices (pure): which devices would
satisfy them, or why none do.

A foreign pod (made by others, `schedulerName: shoal`) brings its own claims. Shoal
allocates them as kube-scheduler's DRA plugin would: each request of each claim takes
`count` devices of its DeviceClass that also meet the request's own CEL selectors, none
of them in use, none taken twice. Supported: `exactly` requests with `ExactCount`
(whole devices). Not yet: `All` mode, `firstAvailable`, capacity requests, constraints;
a claim that uses one is refused with that reason rather than allocated wrongly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.backends.kubernetes.dra.devices import Device, Inventory
from scheduler.backends.kubernetes.dra.selectors import DeviceClasses, SelectorError
from scheduler.backends.kubernetes.dra.usage import Usage

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Request:
    claim: str  # namespace/name, for messages
    name: str
    device_class: str
    selectors: tuple[Obj, ...]
    count: int


def requests_of(claim: Obj) -> list[Request] | str:
    """The claim's requests, or why Shoal cannot allocate it."""
    meta = claim.get("metadata") or {}
    who = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    devices = (claim.get("spec") or {}).get("devices") or {}
    if devices.get("constraints"):
        return f"ResourceClaim {who} has constraints, which Shoal does not evaluate yet"
    out = []
    for r in devices.get("requests") or []:
        exactly = r.get("exactly")
        if exactly is None:
            return f"ResourceClaim {who} request {r.get('name')}: only `exactly` is supported"
        if exactly.get("allocationMode", "ExactCount") != "ExactCount" or exactly.get("capacity"):
            return (
                f"ResourceClaim {who} request {r.get('name')}: only whole devices counted "
                "exactly (allocationMode ExactCount, no capacity) are supported"
            )
        out.append(
            Request(
                who,
                str(r.get("name", "")),
                str(exactly.get("deviceClassName", "")),
                tuple(exactly.get("selectors") or ()),
                int(exactly.get("count", 1)),
            )
        )
    return out


def pick(
    requests: Sequence[Request],
    devices: Iterable[Device],
    classes: DeviceClasses,
    usage: Usage,
    prefer: Sequence[Device] = (),
) -> list[tuple[Request, Device]] | str:
    """(request, device) for every device the requests take among `devices` (one
    node's), those in `prefer` first; or why they do not fit, naming the request and,
    when some device of the class exists, why the nearest one was refused."""
    order = [*prefer, *(d for d in devices if d not in prefer)]
    taken: set[tuple[str, str, str]] = set()
    out: list[tuple[Request, Device]] = []
    for r in requests:
        why_first: str | None = None
        got = 0
        for d in order:
            if got == r.count:
                break
            if d.key in taken:
                continue
            try:
                why = classes.explain(r.device_class, d, r.selectors)
            except SelectorError as e:
                return f"ResourceClaim {r.claim} request {r.name}: {e}"
            why = why or usage.why_not(d, None)
            if why is not None:
                why_first = why_first or why
                continue
            taken.add(d.key)
            out.append((r, d))
            got += 1
        if got < r.count:
            detail = f": {why_first}" if why_first else ""
            return (
                f"ResourceClaim {r.claim} request {r.name}: {got} of {r.count} device(s) of "
                f"class {r.device_class} free and matching its selectors{detail}"
            )
    return out


def nodes_for(
    requests: Sequence[Request], inventory: Inventory, classes: DeviceClasses, usage: Usage
) -> tuple[list[str], str]:
    """The nodes whose devices satisfy every request, and (when none do) why not, as
    the last node refused them, for the pod's pending reason."""
    by_node: dict[str, list[Device]] = {}
    for d in inventory.devices:
        if d.node:
            by_node.setdefault(d.node, []).append(d)
    fits, reason = [], f"no node publishes devices for {requests[0].claim}" if requests else ""
    for node in sorted(by_node):
        got = pick(requests, by_node[node], classes, usage)
        if isinstance(got, str):
            reason = f"node {node}: {got}"
        else:
            fits.append(node)
    return fits, ("" if fits else reason)
