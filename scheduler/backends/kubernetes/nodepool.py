"""Shoal's node pool: the nodes whose DRA devices Shoal allocates itself (pure).

kube-scheduler's DynamicResources plugin and Shoal each choose devices from what they
have seen and write the claim's status; neither sees the other's choice in flight, and
neither the API server nor the kubelet checks that a device is in one claim only. So a
device has one allocator: on nodes of the pool (label `key=value`, and a `key=value:
NoSchedule` taint that keeps kube-scheduler's pods, which do not tolerate it, away)
Shoal allocates; on every other DRA node kube-scheduler does, and Shoal offers none of
its GPUs (`outside_reason` says why). `KubeConfig.dra_outside_pool` turns that off for
clusters where no other scheduler allocates DRA devices.

Shoal's own pods tolerate the taint (`toleration`), and placement ignores it
(`without_taint`) for every pod Shoal places: the pool is Shoal's room.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.backends.kubernetes.config import KubeConfig
from scheduler.model import Node

Obj = dict[str, Any]
EFFECT = "NoSchedule"


def owns(node: Obj | None, config: KubeConfig) -> bool:
    """Is `node` (a Node object) in Shoal's pool: labelled `pool_key=pool_value`?"""
    if node is None:
        return False
    labels = (node.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(config.pool_key) == config.pool_value)


def may_allocate(node: Obj | None, config: KubeConfig) -> bool:
    """May Shoal allocate DRA devices on `node` (its pool, or anywhere if configured)?"""
    return config.dra_outside_pool or owns(node, config)


def outside_reason(name: str, config: KubeConfig) -> str:
    """Why Shoal offers none of the DRA GPUs of node `name`, which is outside its pool."""
    return (
        f"node {name}: its GPUs are DRA devices outside Shoal's node pool (label "
        f"{config.pool_key}={config.pool_value}), so kube-scheduler allocates them; add "
        f"the label and the taint {config.pool_key}={config.pool_value}:{EFFECT} to give "
        'them to Shoal (docs/kubernetes.md, "Beside kube-scheduler, Kueue and KAI")'
    )


def toleration(config: KubeConfig) -> dict[str, str]:
    """The toleration of the pool's taint that every pod Shoal makes carries."""
    return {
        "key": config.pool_key,
        "operator": "Equal",
        "value": config.pool_value,
        "effect": EFFECT,
    }


def without_taint(node: Node, config: KubeConfig) -> Node:
    """`node` as placement judges it: the pool's taint is no bar to a pod Shoal places."""
    kept = tuple(
        t
        for t in node.taints
        if not (t.key == config.pool_key and t.value == config.pool_value and t.effect == EFFECT)
    )
    return node if len(kept) == len(node.taints) else replace(node, taints=kept)
