"""What the reconcile tests share: a TrainingJob CR, a stored job as the controller sees
it, and a status condition by type (the fresh SQLite store is conftest's `database`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from scheduler.controller import reconcile
from scheduler.spec import spec_json


def tj(name: str = "resnet", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": name,
            "namespace": "shoal-jobs",
            "uid": f"uid-{name}",
            "generation": 1,
        },
        "spec": {"queue": "vision", "image": "x:1", "workers": 2, "gpu": 0.5, **spec},
    }


@dataclass
class FakeJob:
    spec: dict[str, Any]
    id: str = "j1"
    phase: str = "Running"
    queue: str = "vision"
    placements: list[Any] = field(default_factory=list)
    pending_message: str | None = None
    attempt: int = 0
    restarts: int = 0
    cancel_requested: bool = False
    created_at: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    started_at: datetime | None = None
    finished_at: datetime | None = None


def stored(cr: dict[str, Any], **kw: Any) -> FakeJob:
    return FakeJob(spec=spec_json(reconcile.job_spec_of(cr)), **kw)


def condition(decision: reconcile.Decision, type_: str) -> dict[str, Any]:
    return next(c for c in decision.status["conditions"] if c["type"] == type_)
