"""Issue 29 part 1: how the CLI says a pending job's estimated start (`shoal jobs`'s ETA
column, `shoal job`, `submit --follow`'s waiting line)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler.cli.jobs import eta, eta_line, waiting_line


def job(phase: str, estimate: dict[str, Any] | None) -> dict[str, Any]:
    return {"name": "j", "phase": phase, "estimatedStart": estimate, "pendingReason": None}


def at(seconds: float) -> str:
    return datetime.fromtimestamp(time.time() + seconds, UTC).isoformat()


@pytest.mark.parametrize(
    ("phase", "estimate", "column", "words"),
    [
        ("Running", {"at": at(60), "position": 1, "basis": "b", "unknown": ""}, "-", ""),
        ("Pending", None, "-", ""),
        ("Pending", {"at": at(-5), "position": 1, "basis": "b", "unknown": ""}, "#1 now", "b"),
        ("Pending", {"at": at(3 * 3600), "position": 4, "basis": "median", "unknown": ""},
         "#4 ~in 3h", "estimated start #4 ~in 3h (median)"),
        ("Pending", {"at": None, "position": 2, "basis": "", "unknown": "j7 has no runtime"},
         "#2 ?", "start unknown: j7 has no runtime"),
    ],
)  # fmt: skip
def test_eta_in_words(phase: str, estimate: dict[str, Any] | None, column: str, words: str) -> None:
    j = job(phase, estimate)
    assert eta(j) == column
    assert (words in eta_line(j)) if words else eta_line(j) == ""
    if phase == "Pending" and words:
        assert words in waiting_line(j)
