"""Simulated nodes for the local and sim backends, read from a small YAML file.

    nodes:
      - name: node-a          # `replicas: 3` expands to node-a-0 .. node-a-2
        cpu: 16               # cores or "16000m"
        memory: 64Gi
        gpus: 4
        gpuModel: A100-80GB
        gpuMemory: 80Gi

`DEFAULT_CLUSTER` (two nodes of four GPUs) is what `shoal serve` uses when no file is given.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from scheduler.model import Node
from scheduler.spec import parse_cpu_milli, parse_memory_mib

DEFAULT_CLUSTER = resources.files(__package__) / "default-cluster.yaml"


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
            for name in names:
                nodes.append(
                    Node(
                        name=name,
                        cpu_milli=parse_cpu_milli(entry.get("cpu", 8)),
                        memory_mib=parse_memory_mib(str(entry.get("memory", "32Gi"))),
                        gpu_count=int(entry.get("gpus", 0)),
                        gpu_model=str(entry.get("gpuModel", "")),
                        gpu_memory_mib=parse_memory_mib(str(mem)) if mem else 0,
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
