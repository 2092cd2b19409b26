"""The `sim` backend: virtual time, no processes. A worker "runs" from its launch until
launch + the job's duration (given by the trace), then succeeds. `stop` ends it after
the grace period, with exit 143 (the restart starts the job from the beginning: there
is no checkpoint model). Used by `shoal simulate` with the same loop and core."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.backends import base
from scheduler.clock import VirtualClock
from scheduler.model import Node


@dataclass
class SimAttempt:
    request: base.LaunchRequest
    started: float
    duration: float
    stopped_at: float | None = None

    def ends(self) -> float:
        natural = self.started + self.duration
        return natural if self.stopped_at is None else min(natural, self.stopped_at)


class SimBackend:
    def __init__(
        self,
        nodes: Sequence[Node],
        clock: VirtualClock,
        durations: Mapping[str, float] | None = None,
        default_duration_s: float = 3600.0,
    ) -> None:
        self._nodes = tuple(nodes)
        self.clock = clock
        self.durations: dict[str, float] = dict(durations or {})
        self.default_duration_s = default_duration_s
        self.attempts: dict[tuple[str, int], SimAttempt] = {}
        self.launch_count: dict[tuple[str, int], int] = {}
        # Each attempt's statuses as last made, with the state they were made in.
        self._statuses: dict[tuple[str, int], tuple[base.WorkerState, list[base.WorkerStatus]]] = {}

    def capabilities(self) -> base.Capabilities:
        return base.Capabilities()

    def nodes(self) -> Sequence[Node]:
        return self._nodes

    def launch(self, request: base.LaunchRequest) -> None:
        key = (request.job_id, request.attempt)
        if key in self.attempts:
            return
        self.launch_count[key] = self.launch_count.get(key, 0) + 1
        duration = self.durations.get(request.job_id, self.default_duration_s)
        self.attempts[key] = SimAttempt(request, self.clock.now(), duration)

    def stop(
        self, job_id: str, grace_period_s: float, *, reason: str = base.StopReason.STOPPED
    ) -> None:
        now = self.clock.now()
        for (jid, _), a in self.attempts.items():
            if jid == job_id and a.stopped_at is None and a.ends() > now:
                a.stopped_at = now + grace_period_s

    def workers(self) -> Sequence[base.WorkerStatus]:
        """Every worker's state. An attempt's statuses are made again only when its state
        changes (as a watch cache hands back the same pod until it changes): the loop's
        cache tells what changed by identity."""
        now = self.clock.now()
        out: list[base.WorkerStatus] = []
        made = self._statuses
        for key, a in self.attempts.items():
            done = now >= a.ends()
            preempted = a.stopped_at is not None and a.stopped_at < a.started + a.duration
            if not done:
                state, code = base.WorkerState.RUNNING, None
            elif preempted:
                state, code = base.WorkerState.FAILED, 143
            else:
                state, code = base.WorkerState.SUCCEEDED, 0
            hit = made.get(key)
            if hit is None or hit[0] is not state:
                hit = made[key] = (state, self._statuses_of(key, a, state, code))
            out.extend(hit[1])
        return out

    @staticmethod
    def _statuses_of(
        key: tuple[str, int], a: SimAttempt, state: base.WorkerState, code: int | None
    ) -> list[base.WorkerStatus]:
        job_id, attempt = key
        return [
            base.WorkerStatus(
                job_id=job_id,
                attempt=attempt,
                worker=p.worker,
                state=state,
                exit_code=code,
                node=p.node,
                gpus=p.gpus,
                fraction=p.fraction,
                queue=a.request.spec.queue,
            )
            for p in a.request.placements
        ]

    def next_event(self) -> float | None:
        """The earliest virtual time at which some worker ends."""
        now = self.clock.now()
        ends = [a.ends() for a in self.attempts.values() if a.ends() > now]
        return min(ends, default=None)

    def forget_finished(self, live: set[str]) -> None:
        """Drop attempts of jobs no longer live and already ended (keeps cycles cheap)."""
        now = self.clock.now()
        for key in [k for k, a in self.attempts.items() if k[0] not in live and a.ends() <= now]:
            del self.attempts[key]
            self._statuses.pop(key, None)

    def close(self) -> None:
        pass
