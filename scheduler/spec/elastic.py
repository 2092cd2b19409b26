"""An elastic job's size: `workers: {min: 2, max: 8}` (torchrun's `--nnodes=min:max`).

`min` is the gang: the job starts only with at least that many workers and is never
shrunk below it. Between `min` and `max` Shoal picks the size: it starts the job at the
largest that fits its queue's fair share, grows it into idle GPUs and shrinks it
(newest workers first) before it would preempt it. Only PyTorch jobs may be elastic:
torchrun's c10d rendezvous is what lets the workers come and go.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag, ValidationError, model_validator

from scheduler.spec.common import SpecModel

MAX_WORKERS = 4096


class WorkerRange(SpecModel):
    min: int = Field(ge=1, le=MAX_WORKERS, description="the gang: workers it needs to run")
    max: int = Field(ge=1, le=MAX_WORKERS, description="workers it can use at most")

    @model_validator(mode="after")
    def _ordered(self) -> WorkerRange:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be at least min ({self.min})")
        return self


def _kind(value: Any) -> str:
    return "range" if isinstance(value, dict | WorkerRange) else "count"


# A count, or a range: the errors of the form given, not of each form it could have been.
Workers = Annotated[
    Annotated[Annotated[int, Field(ge=1, le=MAX_WORKERS)], Tag("count")]
    | Annotated[WorkerRange, Tag("range")],
    Discriminator(_kind),
]


def one_error(error: ValidationError) -> ValueError:
    """`workers`' errors as one, at `workers` itself: the form's tag (`count`, `range`) out
    of the location, a range's field named in the message."""
    parts = []
    for e in error.errors():
        where = ".".join(str(x) for x in e["loc"][1:])
        msg = str(e["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return ValueError("; ".join(parts))
