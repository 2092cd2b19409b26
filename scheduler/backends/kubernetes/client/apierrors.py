"""The API server's answers as exceptions, and how a client waits before it retries.

`ApiError` is an answer retrying will not fix; `Unavailable` one it did not (or could
not) fix in time; `TokenBucket` and `retry_after_s` pace the retries `Kube` makes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import kubernetes

from scheduler.backends.base import BackendError

TRANSIENT = {429, 500, 502, 503, 504}


class ApiError(BackendError):
    """The API server answered with an error that retrying will not fix (a refused
    write: 403 RBAC or quota, 409, 422 invalid or a webhook's denial)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason = status, reason
        self.transient = status in TRANSIENT


class Unavailable(ApiError):
    """The API server could not be reached, or kept failing, for `retry_deadline_s`."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(status, reason, message)
        self.transient = True


class NotLeader(Unavailable):
    """A write refused before it was sent: this replica's leadership ends (or ended)
    before it could land. Retryable: the next leader will do it."""


class DisruptionBlocked(ApiError):
    """An eviction the API server refused because a PodDisruptionBudget allows no
    disruption now (429 with a `DisruptionBudget` cause): not retried here, the pod
    runs on; `budget` is the PDB's cause message as the API server words it."""

    def __init__(self, message: str, budget: str) -> None:
        super().__init__(429, "TooManyRequests", message)
        self.transient = True
        self.budget = budget


def disruption_cause(e: kubernetes.client.ApiException) -> str | None:
    """The DisruptionBudget cause of an eviction's 429, or None for any other answer
    (a 429 of API Priority and Fairness is an overload: retried as such)."""
    if e.status != 429:
        return None
    try:
        body = json.loads(e.body or "{}")
    except ValueError:
        return None
    causes = (body.get("details") or {}).get("causes") or []
    for cause in causes:
        if cause.get("reason") == "DisruptionBudget":
            return str(cause.get("message") or body.get("message") or "")
    return None


def api_error(e: kubernetes.client.ApiException) -> ApiError:
    """The `ApiError` an ApiException from the client stands for."""
    try:
        body = json.loads(e.body or "{}")
    except ValueError:
        body = {}
    return ApiError(int(e.status or 0), str(body.get("reason", e.reason)), body.get("message", ""))


class TokenBucket:
    """A client-side rate limit, as client-go's: `rate` calls a second on average, up to
    `burst` at once. `take()` waits for a token; thread-safe."""

    def __init__(
        self,
        rate: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self.rate, self.burst = rate, max(1, burst)
        self.clock, self.sleep = clock, sleep
        self._tokens, self._at = float(self.burst), clock()
        self._lock = threading.Lock()

    def take(self) -> float:
        """Take one token, waiting if none is left; returns the seconds waited."""
        with self._lock:
            now = self.clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            self._tokens -= 1
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            self.sleep(wait)
        return wait


def retry_after_s(e: kubernetes.client.ApiException) -> float | None:
    """The server's Retry-After (seconds) on a 429/503, if it sent one."""
    headers = getattr(e, "headers", None) or {}
    raw = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return max(0.0, float(raw)) if raw is not None else None
    except (TypeError, ValueError):
        return None
