"""Per-job backoff arithmetic: when a job may be tried again after a failure, the delay
doubling with each one up to a maximum. The loop keeps three (launches and binds,
retries of failed attempts, jobs whose handling raised); what fails is decided elsewhere
(`scheduler.loop.launching`, `lifecycle`, `isolation`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Backoff:
    """job id -> when it may be tried again; the delay doubles with each failure."""

    base_s: float = 5.0
    max_s: float = 300.0
    _until: dict[str, float] = field(default_factory=dict)
    _failures: dict[str, int] = field(default_factory=dict)

    def hold(self, job_id: str, now: float) -> float:
        """Record one more failure of `job_id`; returns the delay before the next try."""
        delay = self.peek(job_id)
        self._failures[job_id] = self._failures.get(job_id, 0) + 1
        self._until[job_id] = now + delay
        return delay

    def peek(self, job_id: str) -> float:
        """The delay the next `hold(job_id, ...)` would return, changing nothing."""
        n = self._failures.get(job_id, 0) + 1
        return float(min(self.max_s, self.base_s * 2.0 ** (n - 1)))

    def active(self, job_id: str, now: float) -> bool:
        return self._until.get(job_id, 0.0) > now

    def held(self, now: float) -> set[str]:
        """The jobs held at `now` (as many as are in this backoff, not as many as exist)."""
        return {k for k, u in self._until.items() if u > now}

    def until(self, job_id: str) -> float | None:
        return self._until.get(job_id)

    def next_expiry(self, now: float) -> float | None:
        """The earliest time after `now` at which some held job may be tried again."""
        return min((u for u in self._until.values() if u > now), default=None)

    def clear(self, job_id: str) -> None:
        self._until.pop(job_id, None)
        self._failures.pop(job_id, None)

    def keep_only(self, job_ids: set[str]) -> None:
        for k in [k for k in self._failures if k not in job_ids]:
            self.clear(k)
