"""The tiny helper a training script calls to report progress:

    from scheduler.worker import progress
    progress.report(step=10, loss=0.53)

It prints one `SHOAL_PROGRESS {...}` line on stdout; the worker launcher (or anyone
reading the log) parses it. A script without Shoal installed can print the same line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

PREFIX = "SHOAL_PROGRESS "


def report(*, step: int, loss: float | None = None, **metrics: float) -> None:
    data: dict[str, Any] = {"step": step, **metrics}
    if loss is not None:
        data["loss"] = round(float(loss), 6)
    print(PREFIX + json.dumps(data), flush=True)
    sys.stdout.flush()


def parse(line: str) -> dict[str, Any] | None:
    """The progress dict of a `SHOAL_PROGRESS` line, else None."""
    i = line.find(PREFIX)
    if i < 0:
        return None
    try:
        data = json.loads(line[i + len(PREFIX) :])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
