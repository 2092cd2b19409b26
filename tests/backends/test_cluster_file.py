"""The simulated cluster's file (local and sim backends): per-node `labels:` and
`taints:` (issue 24 item 1), checked as Kubernetes checks them, with the error naming
the node and the field."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from scheduler.backends.local import cluster, load_nodes
from scheduler.model import Taint

GOOD = """
nodes:
  - name: h
    replicas: 2
    gpus: 8
    gpuModel: H100
    labels: {nvidia.com/gpu.product: H100, pool: training, gpu.count: 8}
    taints:
      - {key: dedicated, value: research, effect: NoSchedule}
      - {key: spot, effect: PreferNoSchedule}
  - name: plain
    gpus: 4
"""


def test_labels_and_taints_reach_the_nodes() -> None:
    h0, h1, plain = cluster.parse_nodes(yaml.safe_load(GOOD))
    assert h0.labels == {
        "kubernetes.io/hostname": "h-0",
        "nvidia.com/gpu.product": "H100",
        "pool": "training",
        "gpu.count": "8",  # a YAML number, read as the label's text
    }
    assert h1.labels["kubernetes.io/hostname"] == "h-1"
    assert (
        h0.taints
        == h1.taints
        == (
            Taint("dedicated", "research", "NoSchedule"),
            Taint("spot", "", "PreferNoSchedule"),
        )
    )
    assert plain.labels == {"kubernetes.io/hostname": "plain"} and plain.taints == ()


def test_the_default_cluster_has_hostnames_only() -> None:
    assert [(n.labels, n.taints) for n in load_nodes()] == [
        ({"kubernetes.io/hostname": "node-a"}, ()),
        ({"kubernetes.io/hostname": "node-b"}, ()),
    ]


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"labels": ["pool"]}, "labels: must be a map"),
        ({"labels": {"bad key": "x"}}, "labels: 'bad key' is not a label key"),
        ({"labels": {"pool": "a b"}}, "labels.pool: 'a b' is not a label value"),
        ({"labels": {"pool": True}}, "labels.pool: True is not a string (quote it)"),
        ({"labels": {"pool": "x" * 64}}, "labels.pool: 'xxxx"),
        ({"taints": {"key": "k"}}, "taints: must be a list"),
        ({"taints": ["k"]}, "taints[0]: must be a map"),
        ({"taints": [{"effect": "NoSchedule"}]}, "taints[0].key: required"),
        ({"taints": [{"key": "-k", "effect": "NoSchedule"}]}, "taints[0].key: '-k' is not"),
        (
            {"taints": [{"key": "k", "value": "a/b", "effect": "NoSchedule"}]},
            "taints[0].value: 'a/b' is not a label value",
        ),
        (
            {"taints": [{"key": "k", "effect": "NoScheduel"}]},
            "taints[0].effect: must be one of NoSchedule, PreferNoSchedule, NoExecute, "
            "not 'NoScheduel'",
        ),
        ({"taints": [{"key": "k"}]}, "taints[0].effect: must be one of"),
        (
            {"taints": [{"key": "k", "effect": "NoSchedule", "operator": "Exists"}]},
            "taints[0]: unknown field 'operator'",
        ),
        (
            {"taints": [{"key": "k", "effect": "NoSchedule"}] * 2},
            "taints[1]: a second taint k with effect NoSchedule",
        ),
    ],
)
def test_a_bad_label_or_taint_is_refused_naming_the_node_and_field(
    extra: dict[str, Any], error: str
) -> None:
    doc = {"nodes": [{"name": "ok", "gpus": 1}, {"name": "bad", "gpus": 1, **extra}]}
    with pytest.raises(ValueError) as exc:
        cluster.parse_nodes(doc)
    assert str(exc.value).startswith(f"nodes[1] (bad): {error}"), str(exc.value)


def test_an_empty_yaml_value_is_the_empty_label_value() -> None:
    doc = "nodes: [{name: n, labels: {edge: }, taints: [{key: k, value: , effect: NoSchedule}]}]"
    (n,) = cluster.parse_nodes(yaml.safe_load(doc))
    assert n.labels["edge"] == "" and n.taints == (Taint("k", "", "NoSchedule"),)


def test_the_same_taint_key_with_two_effects_is_fine() -> None:
    taints = [{"key": "k", "effect": "NoSchedule"}, {"key": "k", "effect": "NoExecute"}]
    (n,) = cluster.parse_nodes({"nodes": [{"name": "n", "taints": taints}]})
    assert [t.effect for t in n.taints] == ["NoSchedule", "NoExecute"]
