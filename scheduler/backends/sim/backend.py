"""The `sim` backend: virtual time, no processes. Used by `shoal simulate` with the same
loop and core.

A job's work is `duration` (the trace's) times its reference size, in worker-seconds;
the reference size is the number of workers it was first launched with (`sizes`, kept
per job across attempts; a caller may set it before the launch, as a replay does with
the size the trace's duration was measured at). An attempt progresses at one
worker-second per worker per second, so a rigid attempt runs exactly `duration` from its
launch and then succeeds. `stop` ends it after the grace period, with exit 143; the next
attempt starts from nothing (no checkpoint across attempts: a preemption loses all).

Elastic attempts resize in place (`base.Resizable`). Each grow or shrink keeps the work
done so far (the workers checkpoint on the change) and costs `restart_s` of no progress
(torchrun's re-rendezvous and the reload of that checkpoint); then the attempt goes on
at its new size. A grow's new workers run until the attempt ends. A shrink's removed
workers end after their grace period, FAILED with 143 as after a stop (the loop sees
them gone), and a grow may add their index back only once they have."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.backends import base
from scheduler.clock import VirtualClock
from scheduler.model import Node, WorkerPlacement

Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Removed:
    """A worker a shrink took: where it was, when it joined, when it ends."""

    placement: WorkerPlacement
    joined: float
    ends: float


@dataclass
class SimAttempt:
    request: base.LaunchRequest  # its placements: the workers it has now
    started: float
    duration: float  # seconds of work at `reference` workers
    reference: int = 0  # 0: its size at launch
    restart_s: float = 30.0
    stopped_at: float | None = None
    resumed: float = 0.0  # progress goes on from here (the launch, or a resize's restart)
    left: float = 0.0  # seconds of work left at `reference` workers, as of `resumed`
    joined: dict[int, float] = field(default_factory=dict)  # worker -> when it joined
    removed: dict[int, Removed] = field(default_factory=dict)
    resized: list[tuple[float, int, int]] = field(default_factory=list)  # (t, from, to)
    past_gpu_s: float = 0.0  # held by removed workers whose index a grow added back
    natural: float = 0.0  # when it ends unless stopped

    def __post_init__(self) -> None:
        self.reference = self.reference or len(self.request.placements)
        self.resumed, self.left = self.started, self.duration
        self.joined = {p.worker: self.started for p in self.request.placements}
        self.natural = self._end()

    def _end(self) -> float:
        n = len(self.request.placements)
        if n == self.reference:  # the exact float of a rigid attempt: started + duration
            return self.resumed + self.left
        return self.resumed + self.left * self.reference / n

    def ends(self) -> float:
        return self.natural if self.stopped_at is None else min(self.natural, self.stopped_at)

    def last_end(self) -> float:
        """When its last worker ends, a shrink's removed ones included."""
        return max([self.ends(), *(r.ends for r in self.removed.values())])

    def resize(self, now: float, placements: tuple[WorkerPlacement, ...]) -> None:
        """Go on with `placements` from `now`: the work so far kept, after a restart."""
        before = len(self.request.placements)
        self.left -= max(0.0, now - self.resumed) * before / self.reference
        self.left = max(0.0, self.left)
        self.resumed = now + self.restart_s
        self.request = dataclasses.replace(self.request, placements=placements)
        self.resized.append((now, before, len(placements)))
        self.natural = self._end()

    def held_gpu_s(self, until: float) -> float:
        """GPU-seconds its workers held from their start until `until` (or their end)."""
        end = min(until, self.ends())
        out = self.past_gpu_s
        out += sum(p.gpus_held * max(0.0, end - self.joined[p.worker]) for p in self.placements)
        for r in self.removed.values():
            out += r.placement.gpus_held * max(0.0, min(until, r.ends) - r.joined)
        return out

    @property
    def placements(self) -> tuple[WorkerPlacement, ...]:
        return self.request.placements


class SimBackend:
    def __init__(
        self,
        nodes: Sequence[Node],
        clock: VirtualClock,
        durations: Mapping[str, float] | None = None,
        default_duration_s: float = 3600.0,
        restart_s: float = 30.0,
    ) -> None:
        self._nodes = tuple(nodes)
        self.clock = clock
        self.durations: dict[str, float] = dict(durations or {})
        self.default_duration_s = default_duration_s
        self.restart_s = restart_s
        self.sizes: dict[str, int] = {}  # job -> the size its duration is measured at
        self.attempts: dict[Key, SimAttempt] = {}
        self.launch_count: dict[Key, int] = {}
        # Each attempt's statuses as last made, with what they were made from.
        self._statuses: dict[Key, tuple[tuple[object, ...], list[base.WorkerStatus]]] = {}

    def capabilities(self) -> base.Capabilities:
        return base.Capabilities(resizable=self)

    def nodes(self) -> Sequence[Node]:
        return self._nodes

    def launch(self, request: base.LaunchRequest) -> None:
        key = (request.job_id, request.attempt)
        if key in self.attempts:
            return
        self.launch_count[key] = self.launch_count.get(key, 0) + 1
        duration = self.durations.get(request.job_id, self.default_duration_s)
        size = self.sizes.setdefault(request.job_id, len(request.placements))
        self.attempts[key] = SimAttempt(request, self.clock.now(), duration, size, self.restart_s)

    def stop(
        self, job_id: str, grace_period_s: float, *, reason: str = base.StopReason.STOPPED
    ) -> None:
        now = self.clock.now()
        for (jid, _), a in self.attempts.items():
            if jid == job_id and a.stopped_at is None and a.ends() > now:
                a.stopped_at = now + grace_period_s

    def _resizable(self, job_id: str, attempt: int) -> SimAttempt | None:
        a = self.attempts.get((job_id, attempt))
        if a is None or a.stopped_at is not None or a.ends() <= self.clock.now():
            return None  # unknown, stopping or over: nothing joins or leaves it
        return a

    def grow(self, request: base.LaunchRequest) -> None:
        """Start the workers of `request.placements` the attempt lacks (an unknown attempt
        is launched); they join after a restart of the whole attempt."""
        if (request.job_id, request.attempt) not in self.attempts:
            self.launch(request)
            return
        a = self._resizable(request.job_id, request.attempt)
        if a is None:
            return
        now = self.clock.now()
        have = {p.worker for p in a.placements}
        new = [p for p in request.placements if p.worker not in have]
        if not new:
            return
        for p in new:
            old = a.removed.get(p.worker)
            if old is not None and old.ends > now:
                raise base.StillStopping(f"worker {p.worker} of {request.job_id} is still stopping")
        for p in new:
            if (old := a.removed.pop(p.worker, None)) is not None:
                a.past_gpu_s += old.placement.gpus_held * (old.ends - old.joined)
            a.joined[p.worker] = now
        a.resize(now, tuple(sorted((*a.placements, *new), key=lambda p: p.worker)))

    def shrink(
        self, job_id: str, attempt: int, workers: Sequence[int], grace_period_s: float
    ) -> None:
        """Stop these workers (they end after the grace period, exit 143); the others go
        on after a restart. All of them: the attempt is stopped."""
        a = self._resizable(job_id, attempt)
        if a is None:
            return
        now = self.clock.now()
        drop = set(workers)
        keep = tuple(p for p in a.placements if p.worker not in drop)
        if len(keep) == len(a.placements):
            return
        if not keep:
            a.stopped_at = now + grace_period_s
            return
        for p in a.placements:
            if p.worker in drop:
                a.removed[p.worker] = Removed(p, a.joined.pop(p.worker), now + grace_period_s)
        a.resize(now, keep)

    def workers(self) -> Sequence[base.WorkerStatus]:
        """Every worker's state. An attempt's statuses are made again only when its state
        changes (as a watch cache hands back the same pod until it changes): the loop's
        cache tells what changed by identity."""
        now = self.clock.now()
        out: list[base.WorkerStatus] = []
        made = self._statuses
        for key, a in self.attempts.items():
            done = now >= a.ends()
            if not done:
                state, code = base.WorkerState.RUNNING, None
            elif a.stopped_at is not None and a.stopped_at < a.natural:
                state, code = base.WorkerState.FAILED, 143
            else:
                state, code = base.WorkerState.SUCCEEDED, 0
            gone = frozenset(w for w, r in a.removed.items() if r.ends <= now)
            sig = (state, len(a.resized), gone) if a.resized else (state,)
            hit = made.get(key)
            if hit is None or hit[0] != sig:
                hit = made[key] = (sig, self._statuses_of(key, a, state, code, gone))
            out.extend(hit[1])
        return out

    @staticmethod
    def _statuses_of(
        key: Key, a: SimAttempt, state: base.WorkerState, code: int | None, gone: frozenset[int]
    ) -> list[base.WorkerStatus]:
        job_id, attempt = key
        queue = a.request.spec.queue
        out = [
            base.WorkerStatus(
                job_id=job_id,
                attempt=attempt,
                worker=p.worker,
                state=state,
                exit_code=code,
                node=p.node,
                gpus=p.gpus,
                fraction=p.fraction,
                queue=queue,
            )
            for p in a.placements
        ]
        for w, r in sorted(a.removed.items()):
            p, ended = r.placement, w in gone
            out.append(
                base.WorkerStatus(
                    job_id=job_id,
                    attempt=attempt,
                    worker=w,
                    state=base.WorkerState.FAILED if ended else base.WorkerState.RUNNING,
                    exit_code=143 if ended else None,
                    message=f"{base.StopReason.RESIZED}: exit code 143" if ended else "",
                    node=p.node,
                    gpus=p.gpus,
                    fraction=p.fraction,
                    queue=queue,
                    removed=True,
                )
            )
        return out

    def next_event(self) -> float | None:
        """The earliest virtual time at which some worker ends."""
        now = self.clock.now()
        ends = [a.ends() for a in self.attempts.values() if a.ends() > now]
        ends += [r.ends for a in self.attempts.values() for r in a.removed.values() if r.ends > now]
        return min(ends, default=None)

    def forget_finished(self, live: set[str]) -> None:
        """Drop attempts of jobs no longer live and already ended (keeps cycles cheap)."""
        now = self.clock.now()
        old = [k for k, a in self.attempts.items() if k[0] not in live and a.last_end() <= now]
        for key in old:
            del self.attempts[key]
            self._statuses.pop(key, None)
            self.sizes.pop(key[0], None)

    def close(self) -> None:
        pass
