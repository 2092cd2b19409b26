"""What the loop does to one job, as data: a `Transition` (its event, its placement or
phase writes, its pending reason, its stop, its backoffs) and the `Outcome` it counts
as. `lifecycle.decide` returns those that follow the workers; `preempt`, `place` and
`launch_refused` make those of the core's decisions and of a refused launch; `enact`
carries any of them out."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from scheduler.backends.base import StopReason
from scheduler.model import PendingReason, ReasonCode, WorkerPlacement
from scheduler.spec import Phase


class Outcome(StrEnum):
    """Which line of the cycle's report a transition counts on."""

    REQUEUED = "requeued"
    CANCELLED = "cancelled"
    LAUNCH = "launch"  # finish a recorded launch; no phase change
    RETRIED = "retried"
    FAILED = "failed"
    SUCCEEDED = "succeeded"
    RUNNING = "running"
    PREEMPTED = "preempted"
    PLACED = "placed"  # the core placed it: the attempt recorded, the launch follows
    LAUNCH_REFUSED = "launch_refused"  # the cluster refused the launch: Pending again
    RESIZED = "resized"  # an elastic job's new size recorded; the backend follows
    WAITING = "waiting"  # still Pending: why it waits, written


@dataclass(frozen=True, slots=True)
class Write:
    """One phase write, and the crash point reached right after it."""

    phase: Phase
    reason: str
    message: str = ""
    count_restart: bool = False
    fault: str | None = None


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Stop:
    """`backend.stop` after the writes, and the crash point reached after it."""

    grace_s: float
    reason: StopReason
    fault: str | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """A placement to record as a new attempt (Scheduled), and the crash point after it."""

    placements: tuple[WorkerPlacement, ...]
    attempt: int
    fault: str | None = None


@dataclass(frozen=True, slots=True)
class Resize:
    """An elastic job's new placements to record (same attempt), and the crash point after."""

    placements: tuple[WorkerPlacement, ...]
    reason: str
    fault: str | None = None


@dataclass(frozen=True, slots=True)
class Transition:
    """What to do about one job: `event`, then `place` (a new attempt), `resize` or
    `writes` in order (each against the version the previous one returned), then
    `pending` (the reason it waits), then `stop`. `hold_launch`: start the job's launch
    backoff (a broken node must not be a hot loop); `hold_retry`: start its retry backoff
    (the delay `Facts.retry_delay_s` promised)."""

    outcome: Outcome
    writes: tuple[Write, ...] = ()
    event: Event | None = None
    stop: Stop | None = None
    hold_launch: bool = False
    hold_retry: bool = False
    place: Placement | None = None
    pending: PendingReason | None = None
    resize: Resize | None = None


def preempt(grace_s: float, message: str) -> Transition:
    """A preemption the core decided: Preempted (a restart counted), then Pending again
    with its submission time untouched (it keeps its place), then the stop with the
    grace period."""
    return Transition(
        Outcome.PREEMPTED,
        (
            Write(
                Phase.PREEMPTED, "Preempted", message, count_restart=True, fault="preempt:recorded"
            ),
            Write(
                Phase.PENDING,
                "Requeued",
                "back in its queue at its original place",
                fault="preempt:requeued",
            ),
        ),
        stop=Stop(grace_s, StopReason.PREEMPTED, fault="preempt:stopped"),
    )


def place(placements: tuple[WorkerPlacement, ...], attempt: int) -> Transition:
    """A placement the core decided: recorded as attempt `attempt` (Scheduled) before
    anything is launched, so a crash after it leaves a launch the next cycle finishes."""
    return Transition(Outcome.PLACED, place=Placement(placements, attempt, "place:recorded"))


def resized(placements: tuple[WorkerPlacement, ...], reason: str) -> Transition:
    """An elastic job's new size the core decided, recorded before the backend starts
    or stops a worker (a crash after it leaves what `resize.settle` finishes)."""
    return Transition(Outcome.RESIZED, resize=Resize(placements, reason, "resize:recorded"))


def waits(reason: PendingReason) -> Transition:
    """A Pending job stays Pending: why it waits, written."""
    return Transition(Outcome.WAITING, pending=reason)


def launch_refused(message: str, attempt: int, delay_s: float, grace_s: float) -> Transition:
    """The cluster refused a launch (a webhook, a quota, RBAC, an invalid object): Pending
    again with the cluster's words as its reason, retried after `delay_s` (the launch
    backoff, already held); what the attempt made so far is stopped. No `backoffLimit`
    is used up: the job never ran."""
    reason = PendingReason(
        ReasonCode.LAUNCH_FAILED, message, {"attempt": attempt, "retryInSeconds": round(delay_s)}
    )
    return Transition(
        Outcome.LAUNCH_REFUSED,
        (Write(Phase.PENDING, "LaunchFailed", message),),
        pending=reason,
        stop=Stop(grace_s, StopReason.STOPPED),
    )
