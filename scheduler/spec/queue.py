"""A queue's spec: its GPU guarantee and limit (in total and per GPU model), its parent,
weight and priority, and what its jobs may ask of Kubernetes (`allowed`)."""

from __future__ import annotations

import math
from typing import Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from scheduler.spec.allowed import Allowances
from scheduler.spec.common import Name, Priority, SpecModel, dns1123

# The most GPUs a guarantee or limit may name: beyond any cluster, short of the huge
# numbers (1e308) that flatten every bar and fair-share figure (issue 25 item 2).
MAX_QUOTA_GPUS = 1_000_000


class QuotaSpec(SpecModel):
    """GPUs in total and per model: `{total: 8, H100: 4}` (also accepts a bare number)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    # strict: `{"total": false}` is no GPU count (lax mode would read it as 0)
    total: float | None = Field(default=None, ge=0, le=MAX_QUOTA_GPUS, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _number_is_total(cls, data: Any) -> Any:
        return {"total": data} if isinstance(data, (int, float)) else data

    @model_validator(mode="after")
    def _models_non_negative(self) -> QuotaSpec:
        for model, amount in (self.model_extra or {}).items():
            if (
                not isinstance(amount, (int, float))
                or isinstance(amount, bool)
                or not math.isfinite(amount)
                or not 0 <= amount <= MAX_QUOTA_GPUS
            ):
                raise ValueError(f"{model}: GPU amount must be a number in [0, {MAX_QUOTA_GPUS}]")
        return self

    @property
    def by_model(self) -> dict[str, float]:
        return {k: float(v) for k, v in (self.model_extra or {}).items()}


class QueueSpec(SpecModel):
    name: Name
    parent: str | None = None
    guaranteed: QuotaSpec = Field(default_factory=QuotaSpec)
    limit: QuotaSpec | None = None
    weight: float = Field(default=1.0, gt=0)
    priority: Priority = 0
    allowed: Allowances | None = Field(
        default=None,
        description="PriorityClasses, tolerations and node labels its jobs may use (each "
        "kind given replaces the chart's admission.allowed list of that kind)",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return dns1123(v)
