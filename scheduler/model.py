"""The scheduling core's vocabulary: an immutable snapshot in, decisions out.

Everything here is plain data (frozen dataclasses). The scheduler loop, the simulator
and the benchmarks build a `Snapshot`; `scheduler.core.cycle.schedule` turns it into a
`CycleResult`. Time is an input (`Snapshot.now`, seconds), never read from a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

# Fractions are floats; sums of shares are compared with this tolerance so that
# four 0.25 workers fit one GPU exactly.
EPS = 1e-9

TOTAL = "total"  # the key of a quota that counts every GPU model


class Enforcement(StrEnum):
    """How a node holds a fractional worker to its share of a GPU. ADVISORY: the worker
    launcher's cooperative memory cap, nothing stops a process using more. MPS: CUDA MPS
    limits its memory and SMs (the local backend's daemon, or a device plugin sharing by
    MPS). NONE: no fraction (whole GPUs, CPU). ENFORCED: another enforcing mechanism."""

    NONE = "none"
    ADVISORY = "advisory"
    MPS = "mps"
    ENFORCED = "enforced"

    @property
    def enforcing(self) -> bool:
        return self in (Enforcement.MPS, Enforcement.ENFORCED)


@dataclass(frozen=True, slots=True)
class Node:
    """A schedulable node: its allocatable CPU, memory and GPUs (all of one model)."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_model: str = ""
    gpu_memory_mib: int = 0
    # How GPU fractions are held to on this node (reported with every fractional placement).
    enforcement: Enforcement = Enforcement.ADVISORY
    # The device plugin shares each GPU as this many equal MPS replicas (Kubernetes,
    # `nvidia.com/gpu.sharing-strategy=mps`): fractions of at most 1/slices, one replica
    # each, and no whole GPUs. 0: whole GPUs, and fractions of any size.
    slices: int = 0
    # Why no GPU of this node may be shared now (e.g. Kubernetes: a GPU reservation found
    # no GPU in its container); fractional workers do not go here, whole GPUs still do.
    # Empty: fractions may.
    no_sharing: str = ""
    # Why this node offers none of the GPUs it has (Kubernetes: DRA devices outside
    # Shoal's node pool, which kube-scheduler allocates); a GPU job's pending reason
    # names it. Empty: nothing withheld.
    withheld: str = ""
    # Its labels and taints, for jobs' node selectors, affinity and tolerations.
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint: a job goes there only if it tolerates it (`NoSchedule`, `NoExecute`);
    `PreferNoSchedule` only ranks the node lower."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    """Kubernetes' toleration: `Exists` with no key tolerates every taint; no effect
    matches every effect."""

    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement: a label (or, with `field`, the node's name) `In`,
    `NotIn`, `Exists`, `DoesNotExist`, `Gt` or `Lt` the values."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False


Term = tuple[Requirement, ...]  # a node selector term: every requirement holds


@dataclass(frozen=True, slots=True)
class NodeRules:
    """Which nodes a job's workers may use, in Kubernetes' terms (a pod's nodeSelector,
    node affinity and tolerations). Every `required` entry holds (each: any of its
    terms); the `preferred` weights rank the nodes that are allowed. `blocked` says why
    no node can take the job now (a volume or device claim Shoal cannot place);
    `excluded` names nodes it may not use, by why (resources or host ports the nodes'
    pods hold that the core does not count: kube-scheduler's NodeResourcesFit, NodePorts)."""

    selector: tuple[tuple[str, str], ...] = ()
    required: tuple[tuple[Term, ...], ...] = ()
    preferred: tuple[tuple[int, Term], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    blocked: str = ""
    excluded: tuple[tuple[str, frozenset[str]], ...] = ()  # (why, node names)


@dataclass(frozen=True, slots=True)
class Quota:
    """GPUs in total and, optionally, per GPU model. `None` in a limit means unlimited."""

    total: float | None = 0.0
    by_model: Mapping[str, float] = field(default_factory=dict)

    def of(self, model: str | None) -> float | None:
        """The amount for one GPU model (or the total when `model` is None)."""
        if model is None or model == TOTAL:
            return self.total
        return self.by_model.get(model)


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue (Run:ai project/department, Kueue ClusterQueue). `parent` makes a tree."""

    name: str
    guaranteed: Quota = field(default_factory=Quota)
    limit: Quota = field(default_factory=lambda: Quota(total=None))
    weight: float = 1.0
    priority: int = 0
    parent: str | None = None


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What a job asks for, per worker. `gpu` is a fraction in (0, 1) or a whole number;
    `gpu_memory_mib` (exclusive with `gpu`) becomes a fraction of the chosen GPU."""

    id: str
    queue: str
    workers: int = 1
    gpu: float = 0.0
    gpu_memory_mib: int | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_types: tuple[str, ...] = ()
    priority: int = 0
    preemptible: bool | None = None  # None: preemptible when running over guarantee
    submitted_at: float = 0.0
    max_runtime_s: float | None = None
    grace_period_s: float = 30.0
    name: str = ""  # the user's name for it, for messages (ids stay the keys)
    # One GPU holds at most one worker of this job: NCCL aborts when two ranks of one
    # communicator share a device ("Duplicate GPU detected"). Matters for fractions only.
    distinct_gpus: bool = False
    # A fractional worker runs only where fractions are enforced (MPS), never advisory.
    enforced_only: bool = False
    # Where it may run (selector, affinity, tolerations). None: any node without a taint.
    nodes: NodeRules | None = None
    # An elastic job's most workers (`workers` is its least, the gang); 0: not elastic.
    max_workers: int = 0

    @property
    def elastic(self) -> bool:
        return self.max_workers > self.workers

    @property
    def label(self) -> str:
        """How messages name the job: `name (id)`, or the id when it has no name."""
        return f"{self.name} ({self.id})" if self.name and self.name != self.id else self.id


@dataclass(frozen=True, slots=True)
class WorkerPlacement:
    """Where one worker runs: a node, GPU indices on it, and the share of each GPU."""

    worker: int
    node: str
    gpus: tuple[int, ...] = ()
    fraction: float = 1.0  # share of each listed GPU; < 1 only with a single GPU

    @property
    def gpus_held(self) -> float:
        """GPUs this worker holds: its share of each GPU listed. The one count of "GPUs
        held" that quota, fair share, preemption, reasons and every view add up."""
        return len(self.gpus) * self.fraction


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job that holds resources (scheduled or running), with where and since when."""

    job: JobRequest
    placements: tuple[WorkerPlacement, ...]
    started_at: float = 0.0
    # A Preempt was already issued and the job has not stopped yet: it still holds its
    # resources, is not chosen as a victim again, and its room is promised to a preemptor.
    stopping: bool = False
    # Which attempt of the job holds these resources: an earlier attempt still draining
    # while its job runs again is a second entry with the same job and another attempt.
    attempt: int = 0
    # When an elastic job last changed size (None: never): it is not grown again sooner
    # than `Config.resize_interval_s` after, as each resize restarts its workers.
    resized_at: float | None = None
    # -1: the entry holds the attempt's gang (all of it, for a job that is not elastic).
    # k >= 0: the entry is split off the attempt from worker k on: worker k of an elastic
    # job beyond its gang, which a shrink may take alone (`scheduler.core.elastic.split`),
    # or the workers k, k+1, ... a shrink removed that still hold their GPUs (stopping).
    split_from: int = -1
    # A disruption budget holds its workers ("ns/name: why"; empty: none): stopping it
    # would wait (Kubernetes: a PodDisruptionBudget allows no eviction now), so the core
    # prefers other victims; on a stopping entry, what its stop waits for.
    disruption_blocked: str = ""

    @property
    def key(self) -> RunKey:
        """The entry's identity in the core (a job id alone can name two entries)."""
        return RunKey(self.job.id, self.attempt, self.split_from)


class RunKey(NamedTuple):
    job_id: str
    attempt: int
    split_from: int = -1


class Policy(StrEnum):
    BINPACK = "binpack"
    SPREAD = "spread"
    FGD = "fgd"


@dataclass(frozen=True, slots=True)
class Config:
    """Scheduler policy knobs (the Helm chart's ConfigMap maps onto these)."""

    policy: Policy = Policy.FGD
    min_runtime_s: float = 60.0  # a job younger than this is never a preemption victim
    starvation_s: float = 600.0  # a job pending this long gets a reservation
    preemption: bool = True
    # An elastic job grows at most this often (torchrun restarts every worker to resize).
    resize_interval_s: float = 300.0
    # Taints every worker Shoal launches tolerates (the chart's workerTolerations): added
    # to each of its own jobs' tolerations, never to a foreign pod's.
    worker_tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one scheduling cycle may look at."""

    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    running: tuple[RunningJob, ...] = ()
    pending: tuple[JobRequest, ...] = ()
    now: float = 0.0
    config: Config = field(default_factory=Config)


class ReasonCode(StrEnum):
    QUEUE_LIMIT = "QueueLimit"
    PARENT_LIMIT = "ParentLimit"
    FAIR_SHARE = "FairShare"
    GPU_TYPE = "GpuType"
    NO_NODE = "NoFittingNode"
    FRAGMENTATION = "Fragmentation"
    DISTINCT_GPUS = "DistinctGpus"  # fits only with two workers of the job on one GPU
    NODE_RULES = "NodeRules"  # no node its selector, affinity and tolerations allow
    RESERVED = "Reserved"
    WAITING_FOR_PREEMPTION = "WaitingForPreemption"
    UNKNOWN_QUEUE = "UnknownQueue"
    LAUNCH_FAILED = "LaunchFailed"  # the cluster refused the launch (set by the loop)
    JOB_ERROR = "JobError"  # handling this job raised; it waits out a backoff (the loop)

    @property
    def preemption_may_help(self) -> bool:
        """Whether stopping other jobs could let a job pending for this reason run: not
        for a queue that does not exist, a GPU type the cluster lacks, or room held for a
        reservation (taking it would break the promise the reservation makes)."""
        return self not in _NO_PREEMPTION


_NO_PREEMPTION = frozenset(
    {ReasonCode.UNKNOWN_QUEUE, ReasonCode.GPU_TYPE, ReasonCode.RESERVED, ReasonCode.NODE_RULES}
)


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Why a job still waits, in words a person can act on, plus the numbers."""

    code: ReasonCode
    message: str
    details: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Place:
    job_id: str
    placements: tuple[WorkerPlacement, ...]


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: str
    reason: str
    grace_period_s: float
    for_job: str | None = None


@dataclass(frozen=True, slots=True)
class Resize:
    """An elastic running job's new placements: a grow adds workers after its last, a
    shrink keeps its first ones (the newest go, with their grace period)."""

    job_id: str
    placements: tuple[WorkerPlacement, ...]
    reason: str
    grace_period_s: float = 30.0
    for_job: str | None = None

    @property
    def workers(self) -> int:
        return len(self.placements)


@dataclass(frozen=True, slots=True)
class KeepPending:
    job_id: str
    reason: PendingReason


@dataclass(frozen=True, slots=True)
class Violation:
    """Drift found by the invariant check: what runs no longer satisfies policy."""

    kind: str
    message: str
    subject: str = ""


@dataclass(frozen=True, slots=True)
class CycleResult:
    places: tuple[Place, ...] = ()
    preempts: tuple[Preempt, ...] = ()
    pending: tuple[KeepPending, ...] = ()
    violations: tuple[Violation, ...] = ()
    resizes: tuple[Resize, ...] = ()
