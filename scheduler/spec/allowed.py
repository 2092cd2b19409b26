"""Admins' limits on what a job may ask of Kubernetes (issue 37 item 3): the
namespaces its pods may be made in, the PriorityClasses, tolerations, node selectors,
service accounts and host paths its worker pods may carry.

Shoal's own ServiceAccount creates every worker pod, so nothing in the cluster stops a
job that asks for `system-node-critical` or tolerates every taint: this is where it is
stopped. `refusals` is the one rule set; `scheduler.feasibility.check_job` runs it for
every front door (REST, the TrainingJob controller, the CLI through REST).

Where the lists come from: a Queue's `allowed` (per kind), else the chart's
`admission.allowed` (the policy file's `allowed`); a kind neither names allows anything
but the dangerous defaults, which stay refused unless an allow list names them exactly
(a pattern such as `*` does not): `system-*` PriorityClasses, a toleration of every taint
(`operator: Exists` with no key), tolerations of the control-plane taints and hostPath
volumes (a host path must be under a listed prefix).

`namespaces` is the queue-to-namespace map (Kueue's ClusterQueue namespaceSelector, by
name): a job that names no namespace runs in Shoal's jobs namespace, judged by that name.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from scheduler.spec import nodes
from scheduler.spec import volumes as vols
from scheduler.spec.common import SpecModel

if TYPE_CHECKING:  # the job spec imports the queue spec, which imports this
    from scheduler.spec import JobSpec

SYSTEM_CLASSES = "system-*"  # Kubernetes reserves the prefix for cluster-critical pods
CONTROL_PLANE_TAINTS = (
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
)


class Allowances(SpecModel):
    """What jobs may ask; a list left out (null) allows anything but the dangerous
    defaults, an empty list allows nothing."""

    priority_classes: list[str] | None = Field(
        default=None,
        description="PriorityClass names a job may set as priorityClassName; '*' patterns "
        "match (team-*), but a system-* class must be named exactly",
    )
    tolerations: list[nodes.Toleration] | None = Field(
        default=None,
        description="tolerations a job may carry: each covers a job's toleration as "
        "Kubernetes' PodTolerationRestriction whitelist does (same key, or operator Exists "
        "for any value; an empty effect for any effect)",
    )
    node_selector: dict[str, list[str]] | None = Field(
        default=None,
        description="node label keys a job may select on (nodeSelector, and required "
        "nodeAffinity In/Exists terms), each with the values it may ask ('*' patterns)",
    )
    namespaces: list[str] | None = Field(
        default=None,
        description="namespaces a job may run in ('*' patterns; a job naming none runs in "
        "Shoal's jobs namespace): which teams' namespaces may use the queue",
    )
    service_accounts: list[str] | None = Field(
        default=None,
        description="ServiceAccount names a job may set as serviceAccountName ('*' patterns)",
    )
    host_paths: list[str] | None = Field(
        default=None,
        description="directories a hostPath volume may mount, or anything under them; "
        "none allowed by default",
    )

    @field_validator("node_selector")
    @classmethod
    def _label_keys(cls, v: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
        for key in v or {}:
            nodes.label_key(key)
        return v


@dataclass(frozen=True, slots=True)
class Refusal:
    loc: tuple[str | int, ...]  # the job spec's field, camelCase ("tolerations", 0)
    msg: str


@dataclass(frozen=True, slots=True)
class _Source:
    """The list in force for one kind, and where an admin changes it (for messages)."""

    values: Sequence[object] | None
    where: str


def _source(kind: str, queue: str, mine: Allowances | None, chart: Allowances | None) -> _Source:
    own = None if mine is None else getattr(mine, kind)
    alias = Allowances.model_fields[kind].alias or kind
    if own is not None:
        return _Source(
            own,
            f"queue {queue!r} allows only these (its allowed.{alias}, changed by "
            f"PATCH /api/v1/queues/{queue} or the Queue object)",
        )
    wide = None if chart is None else getattr(chart, kind)
    if wide is not None:
        return _Source(wide, f"the chart allows only these (admission.allowed.{alias})")
    return _Source(None, "")


def _how_to_allow(kind: str, queue: str) -> str:
    alias = Allowances.model_fields[kind].alias or kind
    return (
        f"an admin allows it by naming it in queue {queue!r}'s allowed.{alias} "
        f"(PATCH /api/v1/queues/{queue} or the Queue object) or in the chart's "
        f"admission.allowed.{alias}"
    )


def _priority_class(name: str, queue: str, src: _Source) -> str | None:
    listed = [str(p) for p in src.values or ()]
    if fnmatchcase(name, SYSTEM_CLASSES) and name not in listed:
        return (
            f"PriorityClass {name!r} is refused by default (system-* classes are for "
            f"cluster-critical pods: their workers would preempt and outlive the node's "
            f"own agents); {_how_to_allow('priority_classes', queue)}"
        )
    if src.values is not None and not any(fnmatchcase(name, p) for p in listed):
        return f"PriorityClass {name!r} is not allowed: {src.where}: {listed}"
    return None


def covers(allowed: nodes.Toleration, t: nodes.Toleration) -> bool:
    """Whether an admin's `allowed` toleration covers a job's `t`, as Kubernetes'
    PodTolerationRestriction judges a pod's toleration against a namespace whitelist."""
    if allowed.key and allowed.key != t.key:
        return False
    if not allowed.key and allowed.operator != "Exists":
        return False
    if allowed.effect and allowed.effect != t.effect:
        return False
    if allowed.operator == "Exists":
        return True
    return t.operator == "Equal" and t.value == allowed.value


def _dangerous(t: nodes.Toleration) -> str | None:
    if t.operator == "Exists" and not t.key:
        return "a toleration of every taint (operator Exists with no key) is refused by default"
    if t.key in CONTROL_PLANE_TAINTS:
        return (
            f"a toleration of the control-plane taint {t.key!r} is refused by default "
            "(workers would land on control-plane nodes)"
        )
    return None


def _toleration(t: nodes.Toleration, queue: str, src: _Source) -> str | None:
    listed = [w for w in src.values or () if isinstance(w, nodes.Toleration)]
    covered = any(covers(w, t) for w in listed)
    danger = _dangerous(t)
    if danger is not None and not covered:
        return f"{danger}; {_how_to_allow('tolerations', queue)}"
    if src.values is not None and not covered:
        shown = [w.model_dump(by_alias=True, exclude_defaults=True) for w in listed]
        return f"this toleration is not allowed: {src.where}: {shown}"
    return None


def _label(key: str, value: str | None, src: _Source) -> str | None:
    """`value` None: the key alone (an Exists term), allowed when the key is listed."""
    listed = src.values
    if not isinstance(listed, dict):
        return None
    if key not in listed:
        return f"node label {key!r} is not allowed: {src.where}: {sorted(listed)}"
    if value is not None and not any(fnmatchcase(value, p) for p in listed[key]):
        return f"{key}={value!r} is not allowed: {src.where}: {key} in {listed[key]}"
    return None


def _named(what: str, name: str, src: _Source) -> str | None:
    """A name checked against a list of '*' patterns (None: anything goes)."""
    listed = [str(p) for p in src.values or ()]
    if src.values is not None and not any(fnmatchcase(name, p) for p in listed):
        return f"{what} {name!r} is not allowed: {src.where}: {listed}"
    return None


def _host_path(path: str, queue: str, src: _Source) -> str | None:
    """A hostPath under a listed directory (the spec refuses `..`: it never climbs out)."""
    if vols.under(path, [str(p) for p in src.values or ()]):
        return None
    if src.values is None:
        return (
            f"host path {path!r} is refused by default (a hostPath reaches the node's own "
            f"files); {_how_to_allow('host_paths', queue)}"
        )
    return f"host path {path!r} is not allowed: {src.where}: {list(src.values)}"


def _selected_labels(spec: JobSpec) -> Iterator[tuple[tuple[str | int, ...], str, str | None]]:
    """Every node label the job requires: (loc, key, value or None for Exists)."""
    for key, value in (spec.node_selector or {}).items():
        yield ("nodeSelector", key), key, value
    required = spec.affinity.node_affinity if spec.affinity is not None else None
    terms = required.required_during_scheduling_ignored_during_execution if required else None
    for i, term in enumerate(terms.node_selector_terms if terms is not None else ()):
        for j, req in enumerate(term.match_expressions):
            loc = (
                "affinity",
                "nodeAffinity",
                "requiredDuringSchedulingIgnoredDuringExecution",
                "nodeSelectorTerms",
                i,
                "matchExpressions",
                j,
            )
            if req.operator == "In":
                for value in req.values:
                    yield loc, req.key, value
            elif req.operator == "Exists":
                yield loc, req.key, None


def refusals(
    spec: JobSpec,
    *,
    queue: str,
    mine: Allowances | None,
    chart: Allowances | None,
    default_namespace: str = "shoal-jobs",
) -> list[Refusal]:
    """What `spec` asks that its queue's limits (`mine`), else the chart's, do not allow;
    empty: nothing refused. `default_namespace`: where a job naming none runs."""
    out: list[Refusal] = []
    namespace = spec.namespace or default_namespace
    msg = _named("namespace", namespace, _source("namespaces", queue, mine, chart))
    if msg is not None:
        out.append(Refusal(("namespace",), msg))
    if spec.priority_class_name is not None:
        src = _source("priority_classes", queue, mine, chart)
        msg = _priority_class(spec.priority_class_name, queue, src)
        if msg is not None:
            out.append(Refusal(("priorityClassName",), msg))
    tolerations = _source("tolerations", queue, mine, chart)
    for i, t in enumerate(spec.tolerations or ()):
        msg = _toleration(t, queue, tolerations)
        if msg is not None:
            out.append(Refusal(("tolerations", i), msg))
    labels = _source("node_selector", queue, mine, chart)
    for loc, key, value in _selected_labels(spec):
        msg = _label(key, value, labels)
        if msg is not None:
            out.append(Refusal(loc, msg))
    if spec.service_account_name is not None:
        src = _source("service_accounts", queue, mine, chart)
        msg = _named("ServiceAccount", spec.service_account_name, src)
        if msg is not None:
            out.append(Refusal(("serviceAccountName",), msg))
    paths = _source("host_paths", queue, mine, chart)
    for i, volume in enumerate(spec.volumes or ()):
        if volume.host_path is not None:
            msg = _host_path(volume.host_path.path, queue, paths)
            if msg is not None:
                out.append(Refusal(("volumes", i, "hostPath", "path"), msg))
    return out
