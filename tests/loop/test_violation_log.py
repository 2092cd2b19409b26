"""Drift is logged when it appears and when it clears, not once per cycle it lasts."""

from __future__ import annotations

import logging

import pytest

from scheduler import model
from scheduler.loop.apply import report_violations

AWAY = model.Violation("unknown-node", "job pod:ns/p runs on unknown node kw-1", "pod:ns/p")
OVER = model.Violation("gpu-overcommit", "GPU 0 of node n1 is 1.5 allocated", "n1/0")


def _messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    out = [(r.levelno, r.getMessage()) for r in caplog.records]
    caplog.clear()
    return out


def test_lasting_drift_is_logged_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="scheduler.loop.apply")
    reported: set[model.Violation] = set()
    report_violations([AWAY], reported)
    assert _messages(caplog) == [(logging.WARNING, f"invariant: unknown-node: {AWAY.message}")]
    for _ in range(3):  # the node stays away for three more cycles
        report_violations([AWAY], reported)
    assert _messages(caplog) == []
    report_violations([AWAY, OVER], reported)
    assert _messages(caplog) == [(logging.WARNING, f"invariant: gpu-overcommit: {OVER.message}")]
    report_violations([OVER], reported)
    assert _messages(caplog) == [(logging.INFO, f"invariant cleared: unknown-node: {AWAY.message}")]
    assert reported == {OVER}


def test_without_memory_every_violation_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="scheduler.loop.apply")
    report_violations([AWAY], None)
    report_violations([AWAY], None)
    assert [lvl for lvl, _ in _messages(caplog)] == [logging.WARNING, logging.WARNING]
