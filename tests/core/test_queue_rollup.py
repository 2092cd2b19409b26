"""The one roll-up of queue amounts (`accounting.QueueTree.rollup`): a parent holds its
whole subtree, as fair share counts it; the API's views and a Queue CR's status use it."""

from __future__ import annotations

from scheduler.core.accounting import QueueTree
from scheduler.model import Queue


def _tree(parents: dict[str, str | None]) -> QueueTree:
    return QueueTree.build(Queue(name, parent=parent) for name, parent in parents.items())


def test_rollup_sums_every_descendant() -> None:
    tree = _tree({"org": None, "dept": "org", "a": "dept", "b": "dept", "solo": None})
    got = tree.rollup({"a": 1.5, "b": 2.0, "dept": 0.5, "gone": 1.0})
    assert got == {"a": 1.5, "b": 2.0, "dept": 4.0, "org": 4.0, "solo": 0.0, "gone": 1.0}


def test_a_cycle_ends_the_chain() -> None:
    assert _tree({"x": "y", "y": "x"}).rollup({"x": 1.0}) == {"x": 1.0, "y": 1.0}


def test_subtree_is_a_queue_and_everything_below_it() -> None:
    tree = _tree({"org": None, "dept": "org", "a": "dept", "solo": None})
    assert tree.subtree("dept") == {"dept", "a"}
    assert tree.subtree("org") == {"org", "dept", "a"}
    assert tree.subtree("gone") == {"gone"}
