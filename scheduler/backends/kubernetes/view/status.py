"""Reading state back from pods (pure): worker status, the allocations Shoal holds, and
foreign pods that ask Shoal to schedule them.

Worker pods carry their job, attempt and index as labels and their placement as
annotations, so a restarted scheduler rebuilds every allocation from the cluster alone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.backends.base import WorkerState, WorkerStatus
from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.view import inventory, podfit, podrules
from scheduler.model import JobRequest, NodeRules, RunningJob, WorkerPlacement
from scheduler.placement import eligible
from scheduler.spec.quantities import parse_memory_mib
from scheduler.worker import checkin

Obj = dict[str, Any]
# Pod failures that are the infrastructure's, not the job's: the kubelet refused the pod
# at admission (a device plugin that lost a GPU, resources double-booked), evicted it
# under node pressure, or the node shut down. They retry without using up backoffLimit.
ADMISSION_REASONS = frozenset(
    {
        "UnexpectedAdmissionError",
        "NodeAffinity",
        "NodeSelectorMismatching",
        "InvalidNodeInfo",
        "Evicted",
        "Terminated",  # graceful node shutdown
        "NodeShutdown",
        "Shutdown",
        "NodeLost",
        "Preempting",
    }
)
_PHASES = {
    "Pending": WorkerState.PENDING,
    "Running": WorkerState.RUNNING,
    "Succeeded": WorkerState.SUCCEEDED,
    "Failed": WorkerState.FAILED,
}


@dataclass(frozen=True, slots=True)
class Allocation:
    """What one job holds on the cluster now (its newest live attempt)."""

    job_id: str
    attempt: int
    queue: str
    placements: tuple[WorkerPlacement, ...]


@dataclass(frozen=True, slots=True)
class ForeignPod:
    """A pod someone else created with `schedulerName: shoal`, waiting to be placed."""

    namespace: str
    name: str
    uid: str
    queue: str
    gpu: float = 0.0  # a fraction, or whole GPUs from its nvidia.com/gpu request
    gpu_memory_mib: int | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    # Its nodeSelector, node affinity and tolerations (and why it cannot be placed at
    # all: `podrules.unsupported`); its volumes' node affinity is added by `VolumeRules`.
    rules: NodeRules | None = None
    claims: tuple[str, ...] = ()  # the PersistentVolumeClaims it mounts
    # Its ResourceClaims (DRA), by name; "" for one the resourceclaim controller has not
    # made from its template yet.
    dra_claims: tuple[str, ...] = ()
    group: str = ""  # the PodGroup it names (spec.schedulingGroup), in its namespace
    # All it asks of a node as kube-scheduler counts it (the core counts cpu, memory and
    # GPUs; `nodefit` the rest: other resources, the pod count, host ports).
    ask: podfit.Ask = field(default_factory=podfit.Ask)
    # `spec.priority` (its PriorityClass's value, set by the API server's admission):
    # Shoal's ordering and preemption read it as kube-scheduler's do.
    priority: int = 0
    created_at: float = 0.0  # its creationTimestamp: its place among equal priorities

    @property
    def job_id(self) -> str:
        return f"pod:{self.namespace}/{self.name}"

    def to_job_request(self) -> JobRequest:
        """A single-worker job for the scheduling core."""
        return JobRequest(
            id=self.job_id,
            queue=self.queue,
            workers=1,
            gpu=self.gpu,
            gpu_memory_mib=self.gpu_memory_mib,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            priority=self.priority,
            submitted_at=self.created_at,
            nodes=self.rules,
        )


def is_worker(pod: Obj) -> bool:
    """A Shoal worker pod, or an adopted foreign pod (not a reservation)."""
    if names.labels_of(pod).get(names.COMPONENT) == names.RESERVATION_COMPONENT:
        return False
    return names.JOB_ID in names.annotations_of(pod) and (
        names.is_managed(pod) or names.NODE in names.annotations_of(pod)
    )


def _container(pod: Obj) -> Obj:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for cs in statuses:
        if cs.get("name") == "worker":
            return dict(cs)
    return dict(statuses[0]) if statuses else {}


def _failed_init(pod: Obj) -> tuple[str, Obj] | None:
    """(name, terminated state) of the init container that failed the pod, if one did
    (with restartPolicy Never its worker container then never starts)."""
    for cs in (pod.get("status") or {}).get("initContainerStatuses") or []:
        done = (cs.get("state") or {}).get("terminated") or {}
        if done.get("exitCode") not in (None, 0):
            return str(cs.get("name") or ""), dict(done)
    return None


def _waiting(pod: Obj, worker: Obj) -> Obj:
    """Why a bound worker has not started: its container's waiting state, or, while that
    is only PodInitializing, an init container's (an image it cannot pull, a bad config)."""
    waiting = dict((worker.get("state") or {}).get("waiting") or {})
    if waiting.get("reason") not in (None, "", "PodInitializing"):
        return waiting
    for cs in (pod.get("status") or {}).get("initContainerStatuses") or []:
        held = (cs.get("state") or {}).get("waiting") or {}
        if held.get("reason") not in (None, "", "PodInitializing"):
            return {**held, "reason": f"init container {cs.get('name')}: {held['reason']}"}
    return waiting


def share_check_failure(pod: Obj) -> tuple[str, str] | None:
    """(what a share's check-in said, when it exited) if it exited
    `checkin.NO_GPU_EXIT` with a termination message starting `checkin.PREFIX` (it saw
    no GPU: the runtime did not honour NVIDIA_VISIBLE_DEVICES), else None. It checks in
    in its init container (`names.SHARE_CHECK`) or, in a pod made without one, in the
    worker launcher: both are read the same way. Shares only: no other worker checks."""
    if names.RESERVATION not in names.labels_of(pod):
        return None
    init = _failed_init(pod)
    cs = _container(pod)
    states = [cs.get("state") or {}, cs.get("lastState") or {}]
    if init is not None and init[0] == names.SHARE_CHECK:
        states.insert(0, {"terminated": init[1]})
    for state in states:
        done = state.get("terminated") or {}
        said = str(done.get("message") or "").strip()
        if done.get("exitCode") == checkin.NO_GPU_EXIT and said.startswith(checkin.PREFIX):
            return said, str(done.get("finishedAt") or "")
    return None


def infrastructure_failure(pod: Obj) -> str | None:
    """Why a failed (or failing) pod is the infrastructure's fault, or None: a kubelet
    admission rejection (`UnexpectedAdmissionError`, `OutOf…`), an eviction, a node
    shutdown, a `DisruptionTarget` condition (taint manager, eviction API, preemption,
    pod GC: the pod is about to go whatever its containers do), or a share that checked
    in and saw no GPU (`share_check_failure`)."""
    st = pod.get("status") or {}
    if st.get("phase") == "Succeeded":
        return None
    if (blind := share_check_failure(pod)) is not None:
        return blind[0]
    for cond in st.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return ": ".join(
                x for x in ("DisruptionTarget", cond.get("reason"), cond.get("message")) if x
            )
    reason = str(st.get("reason") or "")
    if st.get("phase") == "Failed" and (reason in ADMISSION_REASONS or reason.startswith("OutOf")):
        return ": ".join(x for x in (reason, st.get("message")) if x)
    return None


def node_failure(
    pod: Obj, nodes: Mapping[str, Obj], now: dt.datetime, lost_after_s: float
) -> str | None:
    """Why the node a bound pod runs on makes it a failed worker, or None: the node is
    gone, or has not been Ready for `lost_after_s` (its kubelet is not coming back soon)."""
    name = (pod.get("spec") or {}).get("nodeName")
    if not name or (pod.get("status") or {}).get("phase") in inventory.TERMINAL:
        return None
    node = nodes.get(name)
    if node is None:
        return f"node {name} is gone"
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") != "Ready" or cond.get("status") == "True":
            continue
        since = _time(cond.get("lastTransitionTime"))
        if since is not None and (now - since).total_seconds() >= lost_after_s:
            return f"node {name} has not been Ready for {lost_after_s:.0f}s"
    return None


def _time(text: Any) -> dt.datetime | None:
    if not text:
        return None
    try:
        t = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def failed_by_infrastructure(w: WorkerStatus, why: str) -> WorkerStatus:
    return replace(w, state=WorkerState.FAILED, message=why, retryable=True)


def worker_status(pod: Obj) -> WorkerStatus:
    labels, ann = names.labels_of(pod), names.annotations_of(pod)
    st = pod.get("status") or {}
    state = _PHASES.get(st.get("phase", "Pending"), WorkerState.PENDING)
    infra = infrastructure_failure(pod)
    if infra is not None:
        state = WorkerState.FAILED
    cs = _container(pod)
    term = (
        (cs.get("state") or {}).get("terminated")
        or (cs.get("lastState") or {}).get("terminated")
        or {}
    )
    if not term and (init := _failed_init(pod)) is not None:
        # The worker never started: say which init container failed, and how.
        name, term = init
        term["reason"] = f"init container {name}: {term.get('reason') or 'failed'}"
    waiting = _waiting(pod, cs)
    exit_code = term.get("exitCode")
    if state is WorkerState.SUCCEEDED and exit_code is None:
        exit_code = 0
    node = (pod.get("spec") or {}).get("nodeName", "")
    if infra is not None:
        message = infra
    elif state is WorkerState.FAILED:
        message = ": ".join(
            x
            for x in (
                st.get("reason") or term.get("reason", ""),
                st.get("message") or term.get("message", ""),
            )
            if x
        )
    elif not node and gates(pod):
        message = f"not bound while scheduling gates remain: {', '.join(gates(pod))}"
    elif not node:
        message = (
            "waiting for the GPU reservation's UUID"
            if names.GPU_FRACTION in ann
            else "not bound yet"
        )
    else:
        message = ": ".join(x for x in (waiting.get("reason", ""), waiting.get("message", "")) if x)
    return WorkerStatus(
        job_id=ann[names.JOB_ID],
        attempt=int(labels.get(names.ATTEMPT, "0")),
        worker=int(labels.get(names.WORKER_INDEX, "0")),
        state=state,
        exit_code=None if exit_code is None else int(exit_code),
        message=message,
        node=node,
        gpus=names.parse_gpus(ann.get(names.GPUS, "")),
        fraction=float(ann.get(names.GPU_FRACTION, "1")),
        queue=labels.get(names.QUEUE, ""),
        retryable=infra is not None,
        still_running=infra is not None and st.get("phase") not in inventory.TERMINAL,
    )


def placement_of(pod: Obj) -> WorkerPlacement:
    ann = names.annotations_of(pod)
    return WorkerPlacement(
        worker=int(names.labels_of(pod).get(names.WORKER_INDEX, "0")),
        node=(pod.get("spec") or {}).get("nodeName") or ann.get(names.NODE, ""),
        gpus=names.parse_gpus(ann.get(names.GPUS, "")),
        fraction=float(ann.get(names.GPU_FRACTION, "1")),
    )


def allocations(pods: list[Obj]) -> dict[str, Allocation]:
    """job id -> the placements of its newest attempt that still holds resources
    (bound or about to be; pods being deleted count until they are gone)."""
    newest: dict[str, int] = {}
    live: dict[tuple[str, int], list[Obj]] = {}
    for pod in pods:
        if not is_worker(pod) or (pod.get("status") or {}).get("phase") in inventory.TERMINAL:
            continue
        job = names.annotations_of(pod)[names.JOB_ID]
        attempt = int(names.labels_of(pod).get(names.ATTEMPT, "0"))
        newest[job] = max(newest.get(job, attempt), attempt)
        live.setdefault((job, attempt), []).append(pod)
    out: dict[str, Allocation] = {}
    for job, attempt in newest.items():
        group = live[(job, attempt)]
        out[job] = Allocation(
            job_id=job,
            attempt=attempt,
            queue=names.labels_of(group[0]).get(names.QUEUE, ""),
            placements=tuple(sorted((placement_of(p) for p in group), key=lambda w: w.worker)),
        )
    return out


def gates(pod: Obj) -> list[str]:
    """The pod's scheduling gates (`spec.schedulingGates`): while any is left, no
    scheduler may bind it (the API server refuses the Binding); Kueue gates pods it has
    not admitted yet."""
    return [str(g.get("name", "")) for g in (pod.get("spec") or {}).get("schedulingGates") or []]


def foreign_pod(pod: Obj, scheduler_name: str) -> ForeignPod | None:
    """The request of a pending foreign pod addressed to Shoal, or None (one still gated
    waits, as kube-scheduler leaves it, until its gates are removed)."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    labels, ann = names.labels_of(pod), names.annotations_of(pod)
    if (
        spec.get("schedulerName") != scheduler_name
        or spec.get("nodeName")
        or names.is_shoal_placed(pod)
        or meta.get("deletionTimestamp")
        or (pod.get("status") or {}).get("phase", "Pending") != "Pending"
        or gates(pod)
    ):
        return None
    reqs = podfit.requests(pod)
    cpu, mem, whole = inventory.pod_requests(pod, reqs)
    gpu, gpu_mem = float(whole), None
    if not whole and names.GPU_FRACTION in ann:
        gpu = float(ann[names.GPU_FRACTION])
    elif not whole and names.GPU_MEMORY in ann:
        gpu_mem = parse_memory_mib(ann[names.GPU_MEMORY])
    return ForeignPod(
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        uid=meta.get("uid", ""),
        queue=labels.get(names.QUEUE, ""),  # none: it waits, told to name one
        gpu=gpu,
        gpu_memory_mib=gpu_mem,
        cpu_milli=cpu,
        memory_mib=mem,
        rules=eligible.rules(
            spec.get("nodeSelector"),
            spec.get("affinity"),
            spec.get("tolerations"),
            blocked=podrules.unsupported(spec),
        ),
        claims=podrules.volume_claims(pod),
        dra_claims=podrules.resource_claims(pod),
        group=str((spec.get("schedulingGroup") or {}).get("podGroupName") or ""),
        ask=podfit.ask(pod, reqs),
        priority=_priority(spec),
        created_at=created.timestamp()
        if (created := _time(meta.get("creationTimestamp")))
        else 0.0,
    )


def _priority(spec: Obj) -> int:
    try:
        return int(spec.get("priority") or 0)
    except (TypeError, ValueError):
        return 0


def adopted(pods: list[Obj]) -> list[RunningJob]:
    """Foreign pods Shoal adopted that still hold (or are about to hold) resources, as
    running single-worker jobs in their queue."""
    out = []
    for pod in pods:
        if (
            not is_worker(pod)
            or names.is_managed(pod)
            or (pod.get("status") or {}).get("phase") in inventory.TERMINAL
        ):
            continue
        p = placement_of(pod)
        cpu, mem, _ = inventory.pod_requests(pod)
        request = JobRequest(
            id=names.annotations_of(pod)[names.JOB_ID],
            queue=names.labels_of(pod).get(names.QUEUE, ""),
            gpu=p.gpus_held,
            cpu_milli=cpu,
            memory_mib=mem,
            priority=_priority(pod.get("spec") or {}),
        )
        out.append(RunningJob(request, (p,)))
    return sorted(out, key=lambda r: r.job.id)
