"""Issue 29 part 1: how the CLI says a pending job's estimated start (`shoal jobs`'s ETA
column, `shoal job`, `submit --follow`'s waiting line)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler.cli.jobs import eta, eta_line, say_waiting, waiting_line


def job(phase: str, estimate: dict[str, Any] | None) -> dict[str, Any]:
    return {"name": "j", "phase": phase, "estimatedStart": estimate, "pendingReason": None}


def at(seconds: float) -> str:
    return datetime.fromtimestamp(time.time() + seconds, UTC).isoformat()


def dated(estimate: dict[str, Any] | None) -> dict[str, Any] | None:
    """`estimate` with its `at` (seconds from now, in the table) made a time when the test
    runs: made at collection, a long suite's earlier tests had aged it."""
    if estimate is None or estimate["at"] is None:
        return estimate
    return {**estimate, "at": at(estimate["at"])}


@pytest.mark.parametrize(
    ("phase", "estimate", "column", "words"),
    [
        ("Running", {"at": 60, "position": 1, "basis": "b", "unknown": ""}, "-", ""),
        ("Pending", None, "-", ""),
        # Passed while it still waits (issue 35: it read `#1 now`): overdue, by this clock
        # or by the server's.
        ("Pending", {"at": -125, "position": 1, "basis": "b", "unknown": ""},
         "#1 overdue", "estimated start #1 overdue: it was due 2m ago (b)"),
        ("Pending", {"at": 30, "position": 1, "basis": "b", "unknown": "", "overdue": True},
         "#1 overdue", "estimated start #1 overdue"),
        ("Pending", {"at": 3 * 3600, "position": 4, "basis": "median", "unknown": ""},
         "#4 ~in 3h", "estimated start #4 ~in 3h (median)"),
        ("Pending", {"at": None, "position": 2, "basis": "", "unknown": "j7 has no runtime"},
         "#2 ?", "start unknown: j7 has no runtime"),
        # The estimator's placeholder: no forecast has placed it in its queue yet.
        ("Pending", {"at": None, "position": 0, "basis": "",
                     "unknown": "the forecast has not run since it was submitted"},
         "?", "start unknown: the forecast has not run since it was submitted"),
    ],
)  # fmt: skip
def test_eta_in_words(phase: str, estimate: dict[str, Any] | None, column: str, words: str) -> None:
    j = job(phase, dated(estimate))
    assert eta(j) == column
    assert (words in eta_line(j)) if words else eta_line(j) == ""
    if phase == "Pending" and words:
        assert words in waiting_line(j)
    assert "now" not in eta(j) and "position 0" not in eta_line(j)


def pending(reason: str, estimate: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "name": "j",
        "phase": "Pending",
        "estimatedStart": estimate,
        "pendingReason": {"code": "Fragmentation", "message": reason},
    }


def test_the_waiting_line_is_said_again_only_when_it_changed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 35: `submit --follow`, piped, printed its waiting line again whenever "~in
    59s" became "~in 58s", wrapped by rich at 80 columns into 3 lines."""
    long = "needs 4 GPUs on one node; the nodes with room have at most 2 free: " + "n" * 60
    said: tuple[Any, ...] = ()
    lines = []

    def follow(j: dict[str, Any]) -> None:
        nonlocal said
        said = say_waiting(j, said)
        lines.append(capsys.readouterr().err)

    def in_(seconds: float, position: int = 1) -> dict[str, Any]:
        return {"at": at(seconds), "position": position, "basis": "median", "unknown": ""}

    follow(pending(long, in_(59)))
    follow(pending(long, in_(58)))  # a second later
    follow(pending(long, in_(59 + 30)))  # a new forecast, half a minute later
    assert lines[0].count("\n") == 1 and long in lines[0], lines  # one line, whole
    assert lines[1:] == ["", ""], lines
    follow(pending(long, in_(59 + 600)))  # ten minutes later: news
    follow(pending("another reason", in_(59 + 600)))
    follow(pending("another reason", in_(59 + 600, position=2)))
    follow(pending("another reason", in_(-1, position=2)))  # passed: overdue
    follow(pending("another reason", in_(-2, position=2)))
    follow(pending("another reason", None))
    assert [x.count("\n") for x in lines[3:]] == [1, 1, 1, 1, 0, 1], lines
    assert "overdue" in lines[6] and "now" not in lines[6], lines
