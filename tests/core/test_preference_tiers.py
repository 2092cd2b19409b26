"""Preferred node affinity and PreferNoSchedule taints rank nodes; they never keep a job
out (issue 24 item 1). A gang goes to its most preferred nodes where it fits whole; when
it fits only with less preferred nodes too, it must still be placed (the tiers were
once tried one at a time: such a gang waited, and one PreferNoSchedule taint kept a
two-node job with no rules from ever running)."""

from __future__ import annotations

import dataclasses

from support.builders import job, node, queue, snapshot

from scheduler import model as m
from scheduler.core import cycle

Q = [queue("q").obj()]
FAST = dataclasses.replace(node("fast", 8), labels={"pool": "fast"})
SLOW = dataclasses.replace(node("slow", 8), labels={"pool": "slow"})
PREFER_FAST = m.NodeRules(preferred=((10, (m.Requirement("pool", "In", ("fast",)),)),))
SPOT = dataclasses.replace(node("spot", 8), taints=(m.Taint("spot", "", "PreferNoSchedule"),))


def _nodes(nodes: list[m.Node], j: m.JobRequest) -> set[str]:
    result = cycle.schedule(snapshot(nodes, Q, (), [j]))
    return {p.node for place in result.places for p in place.placements}


def test_a_gang_that_fits_the_preferred_nodes_goes_there() -> None:
    j = dataclasses.replace(job("j", "q").gpu(4).workers(2).obj(), nodes=PREFER_FAST)
    assert _nodes([SLOW, FAST], j) == {"fast"}


def test_a_gang_spills_from_the_preferred_nodes_to_the_others() -> None:
    j = dataclasses.replace(job("j", "q").gpu(8).workers(2).obj(), nodes=PREFER_FAST)
    assert _nodes([SLOW, FAST], j) == {"fast", "slow"}


def test_a_prefer_no_schedule_taint_does_not_split_a_gang_off_a_node() -> None:
    j = job("j", "q").gpu(8).workers(2).obj()  # no rules at all
    assert _nodes([node("plain", 8), SPOT], j) == {"plain", "spot"}
