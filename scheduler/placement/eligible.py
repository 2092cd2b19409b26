"""Which nodes a job may use: its node selector, node affinity and tolerations against
the nodes' labels and taints, as kube-scheduler's NodeAffinity and TaintToleration
plugins judge them (the kubelet refuses a pod bound against them), and the nodes a
backend excluded for it (`NodeRules.excluded`: a foreign pod's other resources or host
ports, with kube-scheduler's reason).

`tiers` is what `gang.place_gang` asks: None when every node will do (the hot path: no
rules, no taints), else the allowed nodes by preference. Preferred terms rank before the
packing policy does: a job goes to the most preferred nodes if it fits there, else to
those and the next level together, and so on (a `PreferNoSchedule` taint it does not
tolerate ranks a node below the others of its preference).

`rules` reads the Kubernetes shapes (a pod spec's `nodeSelector`, `affinity`,
`tolerations`; the job spec's fields of the same names) into `model.NodeRules`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler import model as m
from scheduler.placement.state import ClusterState

HARD = ("NoSchedule", "NoExecute")


def tolerates(tol: m.Toleration, taint: m.Taint) -> bool:
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.operator == "Exists":
        return not tol.key or tol.key == taint.key
    return tol.key == taint.key and tol.value == taint.value


def _holds(r: m.Requirement, labels: Mapping[str, str], name: str) -> bool:
    value = name if r.field else labels.get(r.key)
    op = r.operator
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op == "In":
        return value is not None and value in r.values
    if op == "NotIn":
        return value is None or value not in r.values
    if op in ("Gt", "Lt") and value is not None and len(r.values) == 1:
        try:
            a, b = int(value), int(r.values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def matches(term: m.Term, node: m.Node) -> bool:
    """A term with no requirement matches no node (as in Kubernetes)."""
    return bool(term) and all(_holds(r, node.labels, node.name) for r in term)


def refusal(rules: m.NodeRules | None, node: m.Node) -> str | None:
    """Why the job may not use `node` (kube-scheduler's words), or None."""
    tolerations = rules.tolerations if rules is not None else ()
    for t in node.taints:
        if t.effect in HARD and not any(tolerates(x, t) for x in tolerations):
            shown = f"{t.key}={t.value}" if t.value else t.key
            return f"had untolerated taint {{{shown}: {t.effect}}}"
    if rules is None:
        return None
    if rules.blocked:
        return rules.blocked
    if any(node.labels.get(k) != v for k, v in rules.selector):
        return "didn't match the node selector"
    if any(not any(matches(t, node) for t in terms) for terms in rules.required):
        return "didn't match the node affinity"
    return next((why for why, names in rules.excluded if node.name in names), None)


def rank(rules: m.NodeRules | None, node: m.Node) -> tuple[int, int]:
    """Higher is better: the weights of the preferred terms it matches, then fewer
    untolerated `PreferNoSchedule` taints."""
    tolerations = rules.tolerations if rules is not None else ()
    soft = sum(
        1
        for t in node.taints
        if t.effect == "PreferNoSchedule" and not any(tolerates(x, t) for x in tolerations)
    )
    weight = sum(w for w, t in rules.preferred if matches(t, node)) if rules is not None else 0
    return weight, -soft


def tiers(state: ClusterState, job: m.JobRequest) -> list[frozenset[int]] | None:
    """The node indices the job may use, as growing sets: the most preferred nodes, then
    those and the next level, ..., the last all allowed nodes; None: any node (no rules
    and no taints anywhere). Kept for the state's life (its nodes do not change)."""
    rules = job.nodes
    if rules is None and not _tainted(state):
        return None
    key = ("eligible.tiers", rules)
    hit = state.cache.get(key)
    if hit is None:
        ranked: dict[tuple[int, int], set[int]] = {}
        for i, node in enumerate(state.nodes):
            if refusal(rules, node) is None:
                ranked.setdefault(rank(rules, node), set()).add(i)
        # Each tier adds the next preference level to the ones above it: a gang that
        # fits only across levels still runs, on the most preferred nodes it can.
        grown: list[frozenset[int]] = []
        seen: frozenset[int] = frozenset()
        for r in sorted(ranked, reverse=True):
            seen = seen | ranked[r]
            grown.append(seen)
        hit = state.cache[key] = grown
    assert isinstance(hit, list)
    return hit


def _tainted(state: ClusterState) -> bool:
    hit = state.cache.get("eligible.tainted")
    if hit is None:
        hit = state.cache["eligible.tainted"] = any(n.taints for n in state.nodes)
    return bool(hit)


def summary(rules: m.NodeRules | None, nodes: Sequence[m.Node]) -> str:
    """kube-scheduler's one line: `0/3 nodes are available: 2 node(s) didn't match ...`."""
    if rules is not None and rules.blocked:
        return rules.blocked
    why = Counter(r for n in nodes if (r := refusal(rules, n)) is not None)
    parts = [f"{k} node(s) {w}" for w, k in sorted(why.items(), key=lambda x: (-x[1], x[0]))]
    allowed = len(nodes) - sum(why.values())
    return f"{allowed}/{len(nodes)} nodes are available: " + ", ".join(parts)


# ---- the Kubernetes shapes ---------------------------------------------------------


def _term(raw: Mapping[str, Any]) -> m.Term:
    out = []
    for field, key in ((False, "matchExpressions"), (True, "matchFields")):
        for e in raw.get(key) or []:
            values = tuple(str(v) for v in e.get("values") or ())
            op = str(e.get("operator", ""))
            out.append(m.Requirement(str(e.get("key", "")), op, values, field))
    return tuple(out)


def rules(
    node_selector: Mapping[str, str] | None,
    affinity: Mapping[str, Any] | None,
    tolerations: Sequence[Mapping[str, Any]] | None,
    *,
    blocked: str = "",
) -> m.NodeRules | None:
    """`NodeRules` from a pod spec's fields (None when there are none at all)."""
    na = (affinity or {}).get("nodeAffinity") or {}
    req = (na.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms"
    ) or []
    pref = na.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    out = m.NodeRules(
        selector=tuple(sorted((str(k), str(v)) for k, v in (node_selector or {}).items())),
        required=(tuple(_term(t) for t in req),) if req else (),
        preferred=tuple((int(p.get("weight", 1)), _term(p.get("preference") or {})) for p in pref),
        tolerations=tolerations_of(tolerations or ()),
        blocked=blocked,
    )
    return None if out == m.NodeRules() else out


def tolerations_of(raw: Sequence[Mapping[str, Any]]) -> tuple[m.Toleration, ...]:
    return tuple(
        m.Toleration(
            key=str(t.get("key") or ""),
            operator=str(t.get("operator") or "Equal"),
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
        )
        for t in raw
    )


def also(base: m.NodeRules | None, extra: m.NodeRules | None) -> m.NodeRules | None:
    """Both at once: selectors, required terms, preferences and tolerations together."""
    if base is None or extra is None:
        return base if extra is None else extra
    return m.NodeRules(
        selector=tuple(sorted({*base.selector, *extra.selector})),
        required=base.required + extra.required,
        preferred=base.preferred + extra.preferred,
        tolerations=base.tolerations + extra.tolerations,
        blocked=base.blocked or extra.blocked,
        excluded=base.excluded + extra.excluded,
    )
