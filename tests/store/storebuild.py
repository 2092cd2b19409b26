"""Fluent-free little builders for store tests (specs and nodes with sensible defaults)."""

from __future__ import annotations

from typing import Any

from scheduler.model import Node, WorkerPlacement
from scheduler.spec import JobSpec
from scheduler.spec.queue import QueueSpec


def queue(name: str = "vision", **kw: Any) -> QueueSpec:
    return QueueSpec.model_validate({"name": name, **kw})


def job(name: str = "train", queue: str = "vision", **kw: Any) -> JobSpec:
    return JobSpec.model_validate({"name": name, "queue": queue, "image": "img:1", **kw})


def node(name: str = "n1", gpus: int = 8, model: str = "H100", mem: int = 81920) -> Node:
    return Node(name, 64_000, 512_000, gpus, model, mem)


def placement(
    worker: int = 0, node: str = "n1", gpus: tuple[int, ...] = (0,), fraction: float = 1.0
) -> WorkerPlacement:
    return WorkerPlacement(worker, node, gpus, fraction)
