"""Fair share: water-filling and the hierarchical division, as tables of numbers."""

from __future__ import annotations

import pytest
from support.builders import queue

from scheduler import model as m
from scheduler.core import accounting, fairshare


@pytest.mark.parametrize(
    ("amount", "caps", "weights", "expected"),
    [
        pytest.param(12, [10, 10, 10], [1, 1, 1], [4, 4, 4], id="equal split"),
        pytest.param(12, [2, 10, 10], [1, 1, 1], [2, 5, 5], id="capped one frees room"),
        pytest.param(12, [10, 10], [1, 3], [3, 9], id="weights"),
        pytest.param(12, [1, 2], [1, 1], [1, 2], id="all capped, some left over"),
        pytest.param(6, [10, 10], [0, 1], [0, 6], id="zero weight gets nothing"),
        pytest.param(0, [5, 5], [1, 1], [0, 0], id="nothing to split"),
    ],
)
def test_water_fill(
    amount: float, caps: list[float], weights: list[float], expected: list[float]
) -> None:
    assert fairshare.water_fill(amount, caps, weights) == pytest.approx(expected)


def shares(
    queues: list[m.Queue],
    capacity: dict[str, float],
    demand: dict[str, dict[str, float]],
    usage: dict[str, dict[str, float]] | None = None,
) -> dict[str, fairshare.QueueShare]:
    tree = accounting.QueueTree.build(queues)
    use = {q.name: (usage or {}).get(q.name, {}) for q in queues}
    dem = {q.name: demand.get(q.name, {}) for q in queues}
    return fairshare.compute(tree, capacity, use, dem)


T = m.TOTAL

CASES = [
    pytest.param(
        [queue("a").guarantee(4).obj(), queue("b").guarantee(4).obj()],
        {T: 16},
        {"a": {T: 16}, "b": {T: 2}},
        {"a": 14, "b": 2},
        id="idle guarantee is lent; demand caps",
    ),
    pytest.param(
        [queue("a").guarantee(2).weight(1).obj(), queue("b").guarantee(2).weight(3).obj()],
        {T: 12},
        {"a": {T: 100}, "b": {T: 100}},
        {"a": 4, "b": 8},
        id="leftover by weight",
    ),
    pytest.param(
        [queue("a").limit(3).obj(), queue("b").obj()],
        {T: 10},
        {"a": {T: 10}, "b": {T: 10}},
        {"a": 3, "b": 7},
        id="limit caps the share",
    ),
    pytest.param(
        [queue("a").guarantee(8).obj(), queue("b").guarantee(8).obj()],
        {T: 8},
        {"a": {T: 8}, "b": {T: 8}},
        {"a": 4, "b": 4},
        id="oversubscribed guarantees scale down",
    ),
    pytest.param(
        [
            queue("dept").guarantee(8).limit(8).obj(),
            queue("x").parent("dept").guarantee(2).obj(),
            queue("y").parent("dept").obj(),
            queue("other").obj(),
        ],
        {T: 16},
        {"dept": {T: 20}, "x": {T: 10}, "y": {T: 10}, "other": {T: 20}},
        {"dept": 8, "x": 5, "y": 3, "other": 8},
        id="children divide the parent's share",
    ),
]


@pytest.mark.parametrize(("queues", "capacity", "demand", "expected"), CASES)
def test_total_share(
    queues: list[m.Queue],
    capacity: dict[str, float],
    demand: dict[str, dict[str, float]],
    expected: dict[str, float],
) -> None:
    got = shares(queues, capacity, demand)
    assert {name: s.total.share for name, s in got.items()} == pytest.approx(expected)


def test_per_model_share_uses_per_model_guarantee() -> None:
    queues = [queue("a").guarantee(4, H100=4).obj(), queue("b").guarantee(4).obj()]
    got = shares(
        queues,
        {T: 16, "H100": 8, "A100": 8},
        {"a": {T: 16, "H100": 8, "A100": 8}, "b": {T: 16, "H100": 8, "A100": 8}},
    )
    # H100: a is entitled to 4, the other 4 are split evenly; A100: no guarantees.
    assert got["a"].by_model["H100"].share == pytest.approx(6)
    assert got["b"].by_model["H100"].share == pytest.approx(2)
    assert got["a"].by_model["A100"].share == pytest.approx(4)
    arithmetic = got["a"].total
    assert (arithmetic.guaranteed, arithmetic.entitled, arithmetic.pool) == (4, 4, 16)
