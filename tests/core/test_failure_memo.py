"""Admission remembers a failed request shape for the rest of the cycle; the shape is
everything placement reads. A job that its node rules (or `enforcement: required`, or
distinct GPUs) kept out must not keep out the next job of the same size without them
(issue 24 item 1: a job tolerating a taint waited, with the untolerated-taint reason,
behind one of the same size that did not tolerate it; once it had waited past
`starvation_s`, its reservation search found it fits at once and the whole cycle failed
on an assertion)."""

from __future__ import annotations

import dataclasses

import pytest
from support.builders import job, node, queue, snapshot

from scheduler import model as m
from scheduler.core import cycle

Q = [queue("q").obj()]
TAINTED = dataclasses.replace(node("lab", 8), taints=(m.Taint("dedicated", "research"),))
TOLERATES = m.NodeRules(tolerations=(m.Toleration("dedicated", "Equal", "research"),))


def _first(j: m.JobRequest) -> m.JobRequest:
    return dataclasses.replace(j, id="first", submitted_at=1.0)


def _second(j: m.JobRequest) -> m.JobRequest:
    return dataclasses.replace(j, id="second", submitted_at=2.0)


CASES = [
    pytest.param(
        [TAINTED],
        _first(job("-", "q").gpu(8).obj()),
        _second(dataclasses.replace(job("-", "q").gpu(8).obj(), nodes=TOLERATES)),
        id="tolerations",
    ),
    pytest.param(
        [dataclasses.replace(node("a", 8), labels={"pool": "a"})],
        _first(
            dataclasses.replace(
                job("-", "q").gpu(8).obj(), nodes=m.NodeRules(selector=(("pool", "b"),))
            )
        ),
        _second(job("-", "q").gpu(8).obj()),
        id="node-selector",
    ),
    pytest.param(
        [node("a", 4)],
        _first(job("-", "q").gpu(0.5).enforced().obj()),
        _second(job("-", "q").gpu(0.5).obj()),
        id="enforcement",
    ),
    pytest.param(
        [node("a", 1)],
        _first(job("-", "q").gpu(0.5).workers(2).distinct().obj()),
        _second(job("-", "q").gpu(0.5).workers(2).distinct(False).obj()),
        id="distinct-gpus",
    ),
]


@pytest.mark.parametrize(("nodes", "first", "second"), CASES)
def test_a_failure_is_remembered_only_for_the_same_rules(
    nodes: list[m.Node], first: m.JobRequest, second: m.JobRequest
) -> None:
    for now in (3.0, 1000.0):  # waiting briefly; past starvation_s (600 s)
        result = cycle.schedule(snapshot(nodes, Q, (), [first, second], now=now))
        assert [p.job_id for p in result.places] == ["second"], (now, result)
