"""Reading the Alibaba `openb` trace (node list and pod list) into core types.

Used by both benchmarks. The trace is never copied into the repository: the default
path is `../shared/data/alibaba-gpu-2023` relative to the repository root.
"""

from __future__ import annotations

import csv
import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from scheduler import model as m
from scheduler.placement import Demand, WorkloadMix

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared/data/alibaba-gpu-2023"
NODES_CSV = "openb_node_list_gpu_node.csv"
PODS_CSV = "openb_pod_list_default.csv"


@dataclass(frozen=True, slots=True)
class Pod:
    """One task of the pod list, as a worker request."""

    name: str
    task: Demand

    @property
    def gpus(self) -> float:
        """GPUs the task asks for in total (share for a sharing task)."""
        return self.task.gpu

    def job(self, job_id: str) -> m.JobRequest:
        t = self.task
        return m.JobRequest(
            job_id, "trace", gpu=t.gpu, cpu_milli=t.cpu_milli, memory_mib=t.memory_mib,
            gpu_types=t.gpu_types,
        )  # fmt: skip


def load_nodes(data: Path) -> list[m.Node]:
    with (data / NODES_CSV).open(newline="") as f:
        return [
            m.Node(r["sn"], int(r["cpu_milli"]), int(r["memory_mib"]), int(r["gpu"]), r["model"])
            for r in csv.DictReader(f)
        ]


def load_pods(data: Path) -> list[Pod]:
    return load_pod_list(data / PODS_CSV)


def load_pod_list(path: Path) -> list[Pod]:
    """A pod list file; `gpu_spec` is optional (the published multigpuNN lack it)."""
    pods = []
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            count, milli = int(r["num_gpu"]), int(r["gpu_milli"])
            # gpu_milli is the per-GPU share of a sharing task (num_gpu == 1).
            gpu = milli / 1000 if count == 1 and milli < 1000 else float(count)
            types = tuple(t for t in (r.get("gpu_spec") or "").split("|") if t)
            task = Demand(int(r["cpu_milli"]), int(r["memory_mib"]), gpu, None, types)
            pods.append(Pod(r["name"], task))
    return pods


def fingerprint(pods: list[Pod]) -> str:
    """A short digest of a pod list's tasks, to tell the default list from others."""
    h = hashlib.sha256()
    for p in pods:
        t = p.task
        h.update(
            f"{p.name},{t.cpu_milli},{t.memory_mib},{t.gpu},{'|'.join(t.gpu_types)}\n".encode()
        )
    return h.hexdigest()[:12]


def mix_of(pods: list[Pod]) -> WorkloadMix:
    """The pod list's distribution of task types: FGD's target workload."""
    return WorkloadMix(Counter(p.task for p in pods))


def replicate(nodes: list[m.Node], count: int) -> list[m.Node]:
    """`count` nodes made by repeating the node list (names suffixed per copy)."""
    out = []
    for k in range(count):
        n = nodes[k % len(nodes)]
        out.append(m.Node(f"{n.name}-r{k // len(nodes)}", n.cpu_milli, n.memory_mib,
                          n.gpu_count, n.gpu_model, n.gpu_memory_mib))  # fmt: skip
    return out
