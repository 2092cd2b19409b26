"""Reasons precise in numbers and right in words (issue 25 item 8): a gang that may span
nodes is not said to need one node, a node with room for part of a gang does not read as
the job fitting, and a limit reason never suggests a limit the API would refuse."""

from __future__ import annotations

from support.builders import assert_waits, job, node, on, queue, snapshot, state

from scheduler import model as m
from scheduler.core import cycle
from scheduler.placement import diagnose

R = m.ReasonCode


def test_a_gang_reason_says_each_worker_and_across_nodes() -> None:
    gang = job("g", "q").workers(4).gpu(2).obj()
    snap = snapshot([node("a", 2), node("b", 2)], [queue("q").obj()], pending=[gang])
    assert_waits(
        cycle.schedule(snap),
        "g",
        R.NO_NODE,
        "needs 4 workers at once, each 2 GPUs on one node; only 2 fit now across all nodes",
    )


def test_room_for_part_of_a_gang_does_not_read_as_fitting() -> None:
    (fit,) = diagnose(state([node("a", 2)]), job("g", "q").workers(4).obj())
    assert fit.reason == "room for 2 of its 4 workers; all must fit at once"
    (whole,) = diagnose(state([node("a", 8)]), job("g", "q").workers(4).obj())
    assert whole.reason == "fits all 4 workers"


def test_a_limit_reason_names_the_parent_limit_in_the_way() -> None:
    """Raising the child's limit to 12 is refused by the API when its parent's is 8."""
    queues = [
        queue("dept").limit(8).obj(),
        queue("team").limit(4).parent("dept").obj(),
    ]
    held = on(job("old", "team").gpu(4).obj(), "a")
    big = job("big", "team").gpu(8).obj()
    result = cycle.schedule(snapshot([node("a", 8), node("b", 8)], queues, [held], [big]))
    (kept,) = [k.reason for k in result.pending if k.job_id == "big"]
    assert kept.code is R.QUEUE_LIMIT
    assert "raised to 12" not in kept.message, kept.message
    assert "raising its limit alone would not do: its parent dept holds 4 of its limit 8" in (
        kept.message
    )
    assert kept.details["parentLimit"] == {"queue": "dept", "holds": 4.0, "limit": 8.0}
    # A parent with room: raising the child's limit is the way, and it says so.
    roomy = [queue("dept").limit(16).obj(), queue("team").limit(4).parent("dept").obj()]
    result = cycle.schedule(snapshot([node("a", 8), node("b", 8)], roomy, [held], [big]))
    assert_waits(result, "big", R.QUEUE_LIMIT, "or the limit is raised to 12")


def test_no_node_offered_says_so_not_none_mib() -> None:
    """issue 35: with every node cordoned the reason read "needs None MiB of GPU memory
    per worker; the largest GPU of an allowed type has 0 MiB"."""
    for ask in (job("j", "q").gpu(0.5), job("j", "q").gpu(2), job("j", "q").workers(2)):
        snap = snapshot([], [queue("q").obj()], pending=[ask.obj()])
        (kept,) = cycle.schedule(snap).pending
        assert kept.reason.code is R.NO_NODE
        assert "None" not in kept.reason.message, kept.reason.message
        assert kept.reason.message.endswith(
            "no node with GPUs is offered now: none has joined, or all are cordoned or NotReady"
        ), kept.reason.message


def test_a_node_with_room_for_part_of_a_gang_is_part_not_a_fit() -> None:
    """issue 35: explain's candidates said FITS yes for "room for 1 of its 4 workers"."""
    (part,) = diagnose(state([node("a", 1)]), job("g", "q").workers(4).obj())
    assert (part.fits, part.workers) == (False, 1)
    (whole,) = diagnose(state([node("a", 8)]), job("g", "q").workers(4).obj())
    assert (whole.fits, whole.workers) == (True, 4)
    (none,) = diagnose(state([node("a", 0)]), job("g", "q").workers(4).obj())
    assert (none.fits, none.workers) == (False, 0)


def test_a_pod_naming_no_queue_is_told_so() -> None:
    """issue 35: a pod with `schedulerName: shoal` and no queue label was left out of the
    cycle in silence; now it waits with a reason, as one in a queue that does not exist."""
    snap = snapshot([node("a", 8)], [queue("q").obj()], pending=[job("pod:default/p", "").obj()])
    assert_waits(
        cycle.schedule(snap),
        "pod:default/p",
        R.UNKNOWN_QUEUE,
        "it names no queue: give the pod the label shoal.dev/queue=<queue>",
    )
