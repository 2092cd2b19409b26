"""Pure reconcile functions of the CR controller: a TrainingJob or Queue custom resource
(a plain dict, as the API server returns it) plus what the store holds -> one store
action and the status patch to write back.

The CR watcher (`scheduler.controller.watcher`) calls these and hands the action to
`scheduler.controller.apply`; nothing here does I/O, so every case is a table test.
Validation is `scheduler.spec` itself, the same the REST API runs, so a CR and a POST
are accepted or refused for the same reasons.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import pydantic

from scheduler.controller.crdstatus import MESSAGE_MAX
from scheduler.spec import TRAININGJOB, JobSpec, Origin, Phase, spec_json
from scheduler.spec.queue import QueueSpec

GROUP_VERSION = "shoal.dev/v1alpha1"
INVALID = "Invalid"  # status.phase of a CR that never reached the store


class StoredJob(Protocol):
    """What reconcile reads of a stored job (`scheduler.store.schema.JobRow` fits)."""

    @property
    def id(self) -> str: ...
    @property
    def spec(self) -> dict[str, Any]: ...
    @property
    def phase(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def placements(self) -> list[Any]: ...
    @property
    def pending_message(self) -> str | None: ...
    @property
    def attempt(self) -> int: ...
    @property
    def restarts(self) -> int: ...
    @property
    def cancel_requested(self) -> bool: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def finished_at(self) -> datetime | None: ...


@dataclass(frozen=True, slots=True)
class Submit:
    spec: JobSpec
    submitter: str  # "crd:<namespace>": shown as the job's submitter, never parsed
    idempotency_key: str  # "cr:<uid>": a repeat after a crash finds the first job
    origin: Origin  # the CR itself, stored in its own columns (owner refs, cancel_missing)


@dataclass(frozen=True, slots=True)
class Cancel:
    job_id: str


@dataclass(frozen=True, slots=True)
class UpsertQueue:
    spec: QueueSpec
    create: bool


@dataclass(frozen=True, slots=True)
class DeleteQueue:
    name: str


Action = Submit | Cancel | UpsertQueue | DeleteQueue | None


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do about one CR (an action on the store, or none) and the status to show."""

    action: Action
    status: dict[str, Any] = field(default_factory=dict)  # merge-patch of .status


def condition(type_: str, ok: bool, reason: str, message: str = "") -> dict[str, Any]:
    # lastTransitionTime is stamped by the writer (it owns the clock).
    return {
        "type": type_,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message[:MESSAGE_MAX],  # metav1.Condition's limit
    }


def _meta(cr: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = cr.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def errors_of(exc: pydantic.ValidationError, prefix: str = "spec") -> list[str]:
    """'spec.gpu: must be a fraction in (0, 1] ...' for every error pydantic found."""
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "__root__")
        msg = err["msg"].removeprefix("Value error, ")
        out.append(f"{loc}: {msg}")
    return out


def job_spec_of(cr: Mapping[str, Any]) -> JobSpec:
    """The JobSpec of a TrainingJob: its spec with metadata.name as the job's name and
    metadata.namespace as its namespace (its pods are made there)."""
    spec = cr.get("spec") or {}
    if not isinstance(spec, Mapping):
        spec = {"_": spec}  # a non-object spec: let pydantic say so
    for key in ("name", "namespace"):
        if key in spec:
            raise ValueError(f"spec.{key}: not allowed, metadata.{key} is the job's {key}")
    meta = _meta(cr)
    return JobSpec.model_validate(
        {**spec, "name": meta.get("name", ""), "namespace": meta.get("namespace") or None}
    )


def queue_spec_of(cr: Mapping[str, Any]) -> QueueSpec:
    spec = cr.get("spec") or {}
    if not isinstance(spec, Mapping) or "name" in spec:
        raise ValueError("spec.name: not allowed, metadata.name is the queue's name")
    return QueueSpec.model_validate({**spec, "name": _meta(cr).get("name", "")})


def _invalid(reasons: Sequence[str], generation: Any) -> Decision:
    return Decision(
        None,
        {
            "phase": INVALID,
            "reason": "; ".join(reasons),
            "observedGeneration": generation,
            "conditions": [condition("Valid", False, "InvalidSpec", "; ".join(reasons))],
        },
    )


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Top-level spec fields whose values differ (`name` and `namespace`, from the CR's
    metadata, never count: a job stored before it had a namespace is not edited)."""
    keys = (set(old) | set(new)) - {"name", "namespace"}
    return sorted(k for k in keys if old.get(k) != new.get(k))


def submitter(namespace: str) -> str:
    """The submitter of jobs from TrainingJobs in `namespace` (their idempotency scope)."""
    return f"crd:{namespace}"


def reconcile_trainingjob(cr: Mapping[str, Any], existing: StoredJob | None) -> Decision:
    """One TrainingJob against its stored job (None: not submitted yet).

    - invalid spec: no action, `Valid=False` naming each field and reason, phase Invalid;
    - valid and new: Submit (idempotent on the CR's uid);
    - being deleted (deletionTimestamp): Cancel unless already finished;
    - spec edited after submission: refused, `SpecApplied=False` naming the fields (a
      job's spec is immutable, as a Pod's is); the job keeps running as submitted;
    - otherwise: the status of the stored job.
    """
    meta = _meta(cr)
    generation = meta.get("generation")
    if meta.get("deletionTimestamp"):
        if existing is not None and not Phase(existing.phase).finished:
            return Decision(Cancel(existing.id))
        return Decision(None)
    problems: list[str] = []
    try:
        spec: JobSpec | None = job_spec_of(cr)
    except pydantic.ValidationError as exc:
        if existing is None:
            return _invalid(errors_of(exc), generation)
        spec = None
        problems = errors_of(exc)
    except ValueError as exc:
        if existing is None:
            return _invalid([str(exc)], generation)
        spec, problems = None, [str(exc)]
    if existing is None:
        assert spec is not None
        return _submit(meta, spec, generation)
    return _against(existing, spec, problems, generation)


def _submit(meta: Mapping[str, Any], spec: JobSpec, generation: Any) -> Decision:
    """A valid TrainingJob not submitted yet: Submit, idempotent on the CR's uid."""
    namespace = str(meta.get("namespace", "default"))
    uid = str(meta.get("uid") or f"{namespace}/{spec.name}")
    status = {
        "phase": Phase.PENDING.value,
        "reason": "submitted to the scheduler",
        "queue": spec.queue,
        "workers": spec.min_workers,
        "observedGeneration": generation,
        "conditions": [condition("Valid", True, "Accepted")],
    }
    origin = Origin(TRAININGJOB, namespace, spec.name, str(meta.get("uid") or ""))
    # The key and submitter strings stay as stored rows have them (a CR submitted
    # before an upgrade must find its job again); nothing reads identity out of them.
    return Decision(Submit(spec, submitter(namespace), f"cr:{uid}", origin), status)


def _against(
    existing: StoredJob, spec: JobSpec | None, problems: list[str], generation: Any
) -> Decision:
    """A submitted TrainingJob: its job's status, and whether an edit was applied
    (`spec` None: the edited spec is invalid, for `problems`)."""
    status = status_for(existing)
    status["observedGeneration"] = generation
    if spec is None:
        status["conditions"].append(
            condition(
                "SpecApplied",
                False,
                "InvalidEdit",
                "; ".join(problems) + "; the job runs as first submitted",
            )
        )
        return Decision(None, status)
    changed = changed_fields(existing.spec, spec_json(spec))
    if changed:
        fields = ", ".join(f"spec.{f}" for f in changed)
        status["conditions"].append(
            condition(
                "SpecApplied",
                False,
                "ImmutableField",
                f"{fields} cannot change after submission; the job runs as first "
                "submitted (delete and re-create the TrainingJob to change it)",
            )
        )
    else:
        status["conditions"].append(condition("SpecApplied", True, "UpToDate"))
    return Decision(None, status)


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _gpus(placements: Sequence[Mapping[str, Any]]) -> str:
    total = sum(len(p.get("gpus") or ()) * float(p.get("fraction", 1.0)) for p in placements)
    return f"{total:g}"


def _min_workers(workers: Any) -> int:
    """The spec's worker count, or an elastic range's `min`: the size it starts from."""
    return int(workers["min"] if isinstance(workers, Mapping) else workers)


def status_for(job: StoredJob) -> dict[str, Any]:
    """The TrainingJob status that shows a stored job (phase, reason, placements...)."""
    phase = Phase(job.phase)
    placements = [dict(p) for p in job.placements]
    status: dict[str, Any] = {
        "jobId": job.id,
        "phase": phase.value,
        "queue": job.queue,
        "workers": len(placements) or _min_workers(job.spec.get("workers", 1)),
        "gpus": _gpus(placements),
        "attempt": job.attempt,
        "restarts": job.restarts,
        "placements": placements,
        "reason": (job.pending_message or "") if phase is Phase.PENDING else "",
        "conditions": [
            condition("Valid", True, "Accepted"),
            condition(
                "Scheduled",
                bool(placements) or phase is Phase.SUCCEEDED,
                "Placed" if placements else phase.value,
                job.pending_message or "",
            ),
            condition("Finished", phase.finished, phase.value),
        ],
    }
    for key, at in (
        ("submittedAt", job.created_at),
        ("startedAt", job.started_at),
        ("finishedAt", job.finished_at),
    ):
        if at is not None:
            status[key] = _iso(at)
    return status


def reconcile_queue(cr: Mapping[str, Any], existing: QueueSpec | None) -> Decision:
    """One Queue CR against the stored queue: create, update, delete, or say why not."""
    meta = _meta(cr)
    generation = meta.get("generation")
    name = str(meta.get("name", ""))
    if meta.get("deletionTimestamp"):
        return Decision(DeleteQueue(name) if existing is not None else None)
    try:
        spec = queue_spec_of(cr)
    except pydantic.ValidationError as exc:
        return _invalid(errors_of(exc), generation)
    except ValueError as exc:
        return _invalid([str(exc)], generation)
    status = {
        "observedGeneration": generation,
        "conditions": [condition("Valid", True, "Accepted")],
    }
    if existing == spec:
        return Decision(None, status)
    return Decision(UpsertQueue(spec, create=existing is None), status)
