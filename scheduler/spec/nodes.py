"""Where a job's workers may run, in Kubernetes' own shapes: `nodeSelector`,
`tolerations` and `affinity.nodeAffinity` of the job spec, checked as the API server
checks a pod's (`scheduler.placement.eligible` reads them for placement; the Kubernetes
backend puts them on the worker pods as written)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

# A label key: an optional DNS-subdomain prefix and '/', then a name of at most 63
# characters; a value: at most 63 characters, alphanumeric at both ends (or empty).
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


def label_key(v: str) -> str:
    if len(v) > 317 or not LABEL_KEY.match(v):
        raise ValueError(f"{v[:80]!r} is not a label key (such as nvidia.com/gpu.product)")
    return v


def label_value(v: str) -> str:
    if not LABEL_VALUE.match(v):
        raise ValueError(
            f"{v[:80]!r} is not a label value (at most 63 letters, digits, '-', '_', '.')"
        )
    return v


class _K8s(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class Toleration(_K8s):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""
    toleration_seconds: int | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.key:
            label_key(self.key)
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists")
        if self.operator == "Equal" and not self.key:
            raise ValueError("key is required unless operator is Exists")
        label_value(self.value)
        return self


class Requirement(_K8s):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values(self) -> Requirement:
        label_key(self.key)
        n, op = len(self.values), self.operator
        if op in ("In", "NotIn") and not n:
            raise ValueError(f"values must not be empty with operator {op}")
        if op in ("Exists", "DoesNotExist") and n:
            raise ValueError(f"values must be empty with operator {op}")
        if op in ("Gt", "Lt") and (n != 1 or not self.values[0].lstrip("-").isdigit()):
            raise ValueError(f"operator {op} takes exactly one integer value")
        for v in self.values:
            label_value(v)
        return self


class Term(_K8s):
    match_expressions: list[Requirement] = Field(default_factory=list)
    match_fields: list[Requirement] = Field(default_factory=list)

    @field_validator("match_fields")
    @classmethod
    def _fields(cls, v: list[Requirement]) -> list[Requirement]:
        if any(r.key != "metadata.name" or r.operator not in ("In", "NotIn") for r in v):
            raise ValueError("matchFields supports only metadata.name with In or NotIn")
        return v


class NodeSelector(_K8s):
    node_selector_terms: list[Term] = Field(min_length=1)


class Preference(_K8s):
    weight: int = Field(ge=1, le=100)
    preference: Term


class NodeAffinity(_K8s):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[Preference] = Field(
        default_factory=list
    )


class Affinity(_K8s):
    # The CRD keeps fields it does not know here (the API server would prune them
    # silently), so a TrainingJob's podAffinity reaches the controller and is refused.
    model_config = ConfigDict(
        **_K8s.model_config, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )

    node_affinity: NodeAffinity | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_pod_affinity(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in ("podAffinity", "podAntiAffinity"):
                if name in data:
                    raise ValueError(
                        f"{name} is not supported: a job's workers are placed together "
                        "by its gang (use nodeAffinity or nodeSelector)"
                    )
        return data


def node_selector(v: dict[str, str] | None) -> dict[str, str] | None:
    """A `nodeSelector`'s keys and values checked as labels."""
    for k, value in (v or {}).items():
        label_key(k)
        label_value(value)
    return v
