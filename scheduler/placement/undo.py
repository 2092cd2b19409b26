"""One undo log for every piece of a cycle's mutable state.

The cluster state (free capacity), the FGD mix learner and, in the core, the queue
ledger, the GPUs in use per model and the reservation holds all record the inverse of
each change here. `checkpoint` marks a point, `rollback` undoes everything after a
mark (newest first), `commit` makes what was done the new base (nothing before it can
be undone). KAI-Scheduler's `framework/statement.go` is the model: one statement per
cycle, trials (gang attempts, preemption plans, reservations) undone through it.
Checkpoints nest: a trial inside a trial rolls back to its own mark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Undo = Callable[..., None]


class UndoLog:
    __slots__ = ("_after", "_records")

    def __init__(self) -> None:
        self._records: list[tuple[Undo, tuple[Any, ...]]] = []
        # Run once after a rollback (e.g. the cluster state re-groups touched nodes).
        self._after: list[Callable[[], None]] = []

    def record(self, undo: Undo, *args: Any) -> None:
        """Note that `undo(*args)` reverts the change just made."""
        self._records.append((undo, args))

    def after_rollback(self, finish: Callable[[], None]) -> None:
        self._after.append(finish)

    def checkpoint(self) -> int:
        return len(self._records)

    def rollback(self, mark: int) -> None:
        """Undo every change recorded since `checkpoint()` returned `mark`."""
        records = self._records
        if len(records) <= mark:
            return
        while len(records) > mark:
            undo, args = records.pop()
            undo(*args)
        for finish in self._after:
            finish()

    def commit(self) -> None:
        """Keep every change so far for good: the log starts again from here."""
        self._records.clear()

    @contextmanager
    def trial(self) -> Iterator[int]:
        """A what-if: everything changed inside the block is undone on leaving it."""
        mark = self.checkpoint()
        try:
            yield mark
        finally:
            self.rollback(mark)
