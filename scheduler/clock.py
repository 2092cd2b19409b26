"""Where the loop's time comes from: the wall clock in the service, a virtual one in the
simulator. The core never reads a clock; the loop passes `now` into the snapshot."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class WallClock:
    def now(self) -> float:
        return time.time()


class VirtualClock:
    """Time that moves only when told to (`advance_to`), for trace replay."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance_to(self, t: float) -> None:
        self.t = max(self.t, t)


def as_datetime(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)
