"""Simulated nodes for the local and sim backends, read from a small YAML file.

    nodes:
      - name: node-a          # `replicas: 3` expands to node-a-0 .. node-a-2
        cpu: 16               # cores or "16000m"
        memory: 64Gi
        gpus: 4
        gpuModel: A100-80GB
        gpuMemory: 80Gi
        labels:               # optional: for jobs' nodeSelector and nodeAffinity
          pool: training
        taints:               # optional: {key, value, effect}
          - {key: dedicated, value: research, effect: NoSchedule}

Labels are checked as Kubernetes checks them, and every node also has
`kubernetes.io/hostname: <its name>` unless its labels say otherwise. A `NoSchedule` or
`NoExecute` taint keeps out every job that does not tolerate it; `PreferNoSchedule` only
ranks the node below the others.

`DEFAULT_CLUSTER` (two nodes of four GPUs) is what `shoal serve` uses when no file is given.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from scheduler.model import Node, Taint
from scheduler.spec.nodes import label_key, label_value
from scheduler.spec.quantities import parse_cpu_milli, parse_memory_mib

DEFAULT_CLUSTER = resources.files(__package__) / "default-cluster.yaml"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TAINT_FIELDS = frozenset({"key", "value", "effect"})
HOSTNAME = "kubernetes.io/hostname"  # every node has it, as a kubelet labels its node


def _text(v: Any) -> str:
    """A label's key or value as text: YAML reads `8` as a number (taken as "8") and an
    empty value as null (""), but `true` or `1.0` have no one spelling: quote them."""
    if isinstance(v, str):
        return v
    if v is None:
        return ""
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    raise ValueError(f"{v!r} is not a string (quote it)")


def parse_labels(raw: Any) -> dict[str, str]:
    """A node's `labels:` map, keys and values checked as Kubernetes checks them."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError("labels: must be a map of label keys to values")
    out = {}
    for k, v in raw.items():
        try:
            key = label_key(_text(k))
        except ValueError as exc:
            raise ValueError(f"labels: {exc}") from None
        try:
            out[key] = label_value(_text(v))
        except ValueError as exc:
            raise ValueError(f"labels.{key}: {exc}") from None
    return out


def parse_taints(raw: Any) -> tuple[Taint, ...]:
    """A node's `taints:` list of {key, value, effect}; no two with one key and effect."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError("taints: must be a list of {key, value, effect}")
    out: list[Taint] = []
    for i, t in enumerate(raw):
        at = f"taints[{i}]"
        if not isinstance(t, dict):
            raise ValueError(f"{at}: must be a map {{key, value, effect}}")
        unknown = sorted(str(k) for k in t if k not in TAINT_FIELDS)
        if unknown:
            raise ValueError(f"{at}: unknown field {unknown[0]!r} (key, value and effect)")
        if "key" not in t:
            raise ValueError(f"{at}.key: required")
        try:
            key = label_key(_text(t["key"]))
        except ValueError as exc:
            raise ValueError(f"{at}.key: {exc}") from None
        try:
            value = label_value(_text(t.get("value", "")))
        except ValueError as exc:
            raise ValueError(f"{at}.value: {exc}") from None
        effect = t.get("effect")
        if effect not in EFFECTS:
            raise ValueError(f"{at}.effect: must be one of {', '.join(EFFECTS)}, not {effect!r}")
        if any(o.key == key and o.effect == effect for o in out):
            raise ValueError(f"{at}: a second taint {key} with effect {effect}")
        out.append(Taint(key, value, effect))
    return tuple(out)


def parse_nodes(data: Any) -> tuple[Node, ...]:
    """Nodes from the parsed YAML document; raises ValueError naming the bad entry."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise ValueError("a cluster file needs a top-level 'nodes' list")
    nodes: list[Node] = []
    for i, entry in enumerate(data["nodes"]):
        if not isinstance(entry, dict) or "name" not in entry:
            raise ValueError(f"nodes[{i}]: needs at least a name")
        try:
            replicas = int(entry.get("replicas", 0))
            names = (
                [f"{entry['name']}-{r}" for r in range(replicas)]
                if replicas
                else [str(entry["name"])]
            )
            mem = entry.get("gpuMemory", "0")
            labels = parse_labels(entry.get("labels"))
            taints = parse_taints(entry.get("taints"))
            for name in names:
                nodes.append(
                    Node(
                        name=name,
                        cpu_milli=parse_cpu_milli(entry.get("cpu", 8)),
                        memory_mib=parse_memory_mib(str(entry.get("memory", "32Gi"))),
                        gpu_count=int(entry.get("gpus", 0)),
                        gpu_model=str(entry.get("gpuModel", "")),
                        gpu_memory_mib=parse_memory_mib(str(mem)) if mem else 0,
                        labels={HOSTNAME: name, **labels},
                        taints=taints,
                    )
                )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"nodes[{i}] ({entry.get('name')}): {exc}") from None
    if len({n.name for n in nodes}) != len(nodes):
        raise ValueError("node names must be unique")
    return tuple(nodes)


def load_nodes(path: str | Path | None = None) -> tuple[Node, ...]:
    """The nodes of `path`, or of the packaged default cluster."""
    text = DEFAULT_CLUSTER.read_text() if path is None else Path(path).read_text()
    return parse_nodes(yaml.safe_load(text))
