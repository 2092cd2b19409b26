"""Job traces for `shoal simulate`: CSV or YAML, Shoal's own form or the Alibaba
GPU trace (cluster-trace-gpu-v2023 `openb_pod_list_*.csv`).

Shoal form (CSV columns or YAML list items): `name, queue, submit` (seconds),
`duration` (seconds), `workers` (default 1), `gpu` (per worker), optional `gpuType`,
`priority`, `cpu`, `memory`. Alibaba form is recognised by its `creation_time` column:
submit = creation_time, duration = deletion_time - creation_time (capped by
`max_duration_s`: many pods still ran when the trace ended), gpu = gpu_milli/1000 for a
shared GPU or num_gpu whole GPUs, queue = the pod's `qos` class in lower case
(`ls`, `be`, `burstable`, `guaranteed`). CPU-only pods (num_gpu 0) are skipped.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True, slots=True)
class TraceJob:
    name: str
    queue: str
    submit: float
    duration: float
    workers: int = 1
    gpu: float = 1.0
    gpu_type: tuple[str, ...] = ()
    priority: int | None = None
    cpu_milli: int = 1000
    memory_mib: int = 2048


def _alibaba(row: dict[str, str], max_duration_s: float) -> TraceJob | None:
    n, milli = int(row["num_gpu"] or 0), int(row["gpu_milli"] or 0)
    if n == 0:
        return None
    gpu = milli / 1000 if n == 1 and 0 < milli < 1000 else float(n)
    created = float(row["creation_time"] or 0)
    deleted = float(row["deletion_time"] or created + max_duration_s)
    spec = row.get("gpu_spec") or ""
    return TraceJob(
        name=row["name"].lower().replace("_", "-")[:63],
        queue=(row.get("qos") or "default").lower(),
        submit=created,
        duration=max(1.0, min(deleted - created, max_duration_s)),
        gpu=gpu,
        gpu_type=tuple(s for s in spec.split("|") if s),
        cpu_milli=max(1, int(row["cpu_milli"] or 1000)),
        memory_mib=max(1, int(row["memory_mib"] or 1024)),
    )


def _shoal(item: dict[str, Any]) -> TraceJob:
    gpu_type = item.get("gpuType") or item.get("gpu_type") or ()
    if isinstance(gpu_type, str):
        gpu_type = [s for s in gpu_type.split("|") if s]
    return TraceJob(
        name=str(item["name"]),
        queue=str(item.get("queue", "default")),
        submit=float(item.get("submit", 0)),
        duration=float(item["duration"]),
        workers=int(item.get("workers", 1) or 1),
        gpu=float(item.get("gpu", 1) or 1),
        gpu_type=tuple(gpu_type),
        priority=None if item.get("priority") in (None, "") else int(item["priority"]),
        cpu_milli=int(float(item.get("cpu", 1) or 1) * 1000),
        memory_mib=int(item.get("memoryMib", item.get("memory_mib", 2048)) or 2048),
    )


def load(
    path: str | Path, *, limit: int | None = None, max_duration_s: float = 86400.0
) -> list[TraceJob]:
    """The trace's jobs sorted by submit time (the first `limit` of them)."""
    p = Path(path)
    jobs: list[TraceJob] = []
    if p.suffix in (".yaml", ".yml"):
        data = yaml.safe_load(p.read_text())
        items = data.get("jobs", []) if isinstance(data, dict) else data
        jobs = [_shoal(i) for i in items]
    else:
        with p.open(newline="") as f:
            reader = csv.DictReader(f)
            alibaba = "creation_time" in (reader.fieldnames or [])
            for row in reader:
                job = _alibaba(row, max_duration_s) if alibaba else _shoal(dict(row))
                if job is not None:
                    jobs.append(job)
                if limit is not None and len(jobs) >= limit and not alibaba:
                    break
    jobs.sort(key=lambda j: (j.submit, j.name))
    return jobs[:limit] if limit is not None else jobs
