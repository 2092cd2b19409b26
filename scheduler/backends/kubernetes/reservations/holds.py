"""GPUs that reservation pods still hold after their last share (issue 24 item 5).

A reservation pod's GPU is counted through its shares (the loop places them), so once
the last share is gone nothing counted it any more, while the pod itself (kept for
`reservation_grace_s` for reuse, then Terminating for its grace period) still held the
GPU on the kubelet: a whole-GPU pod placed there then failed admission and retried. The
GPU is free when the reservation pod is gone, so until then each such pod is shown to the
core as a stopping entry ("hold") at its own (node, GPU index), in no queue (no queue is
charged for it, nothing preempts it):

- a reservation being deleted (Terminating) holds its whole GPU: nothing else may go
  there, fractions neither (a share cannot join a reservation that is going away);
- a live reservation with no share holds a sliver (`IDLE_SHARE`): no whole-GPU job may
  take that GPU, but fractions may, and reuse the reservation (as `reservation_grace_s`
  intends) rather than make another.

A reservation Shoal just made for a share whose pod is not yet in the cache is not idle
(`claimed`: the loop counts that share already). Pure: pods in, `RunningJob`s out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.view import inventory
from scheduler.model import JobRequest, RunningJob, WorkerPlacement

Obj = dict[str, Any]
PREFIX = "gpu-reservation:"  # a hold's job id: gpu-reservation:<namespace>/<pod>
IDLE_SHARE = 1e-6  # an idle reservation's hold: enough to keep whole GPUs off it
CLAIM_S = 30.0  # a claim (made with the reservation, for its share) lasts at most this


def is_hold(job_id: str) -> bool:
    return job_id.startswith(PREFIX)


def held(pod: Obj, users: int, claimed: bool) -> float:
    """The share of its GPU a reservation pod holds beyond its shares: 1 while it is
    going away, IDLE_SHARE while it lives with no share (and none on its way), else 0."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in inventory.TERMINAL:
        return 0.0  # not bound, or its container is gone: it holds nothing
    if meta.get("deletionTimestamp"):
        return 1.0
    return IDLE_SHARE if users == 0 and not claimed else 0.0


def holds(
    reservations: Iterable[tuple[Obj, int]],
    claims: Mapping[str, float],
    gpu_counts: Mapping[str, int],
) -> list[RunningJob]:
    """Stopping entries for the GPUs that reservation pods hold beyond their shares.
    `reservations`: (pod, shares not finished on it); `claims`: reservation name ->
    when Shoal made or reused it for a share (monotonic; only the keys are read here);
    `gpu_counts`: the GPUs of each node offered now. A hold on a node not offered, or
    on a GPU index past its count (other pods took that room since), is left out: the
    core knows no such GPU (an index past the count would break its cycle)."""
    out = []
    for pod, users in reservations:
        meta = pod["metadata"]
        share = held(pod, users, meta["name"] in claims)
        gpu = names.annotations_of(pod).get(names.GPUS, "")
        if share <= 0 or not gpu.isdigit():
            continue
        if int(gpu) >= gpu_counts.get(str(pod["spec"]["nodeName"]), 0):
            continue
        job = JobRequest(
            id=f"{PREFIX}{meta.get('namespace', '')}/{meta['name']}",
            queue="",  # no queue's: nobody is charged, nobody preempts it
            gpu=share,
        )
        where = WorkerPlacement(0, str(pod["spec"]["nodeName"]), (int(gpu),), share)
        out.append(RunningJob(job, (where,), stopping=True))
    return sorted(out, key=lambda r: r.job.id)
