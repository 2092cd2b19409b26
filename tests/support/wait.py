"""The one way tests wait for something: poll a condition until it holds, with a
deadline generous enough for a loaded 2-core machine. A test never asserts how fast
something happens, only that it does."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

WAIT_S = 60.0  # the default deadline: minutes on a busy machine are fine, hangs are not
MIN_WAIT_S = 30.0  # a shorter deadline is raised to this: a deadline is not a speed test


def eventually(
    check: Callable[[], Any],
    timeout: float = WAIT_S,
    every: float = 0.05,
    what: str = "",
    retry_on: tuple[type[BaseException], ...] = (AssertionError,),
) -> Any:
    """Poll `check` until it returns something truthy, and return that. A `retry_on`
    exception from `check` counts as "not yet"; past `timeout` seconds (at least
    `MIN_WAIT_S`) the last value or exception is reported."""
    timeout = max(timeout, MIN_WAIT_S)
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
            if last:
                return last
        except retry_on as exc:
            last = exc
        if time.monotonic() > deadline:
            name = what or getattr(check, "__name__", repr(check))
            raise AssertionError(f"not met within {timeout:g}s: {name} (last: {last!r})")
        time.sleep(every)
