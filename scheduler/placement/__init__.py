"""Placement: where each worker of a job runs (node, GPU indices, share of a GPU).

Pure (no I/O, no clock); called by `scheduler.core` and the benchmarks. The contract
with the core is in docs/design/0001-team-contracts.md; the policies and the FGD
fragmentation measure are described in docs/design/0002-placement.md.
"""

from scheduler.placement.diagnose import NodeFit, diagnose, explain_choice
from scheduler.placement.fit import Demand, worker_gpu_share
from scheduler.placement.fragmentation import WorkloadMix
from scheduler.placement.gang import place_gang
from scheduler.placement.policies import Scorer
from scheduler.placement.state import ClusterState, Hold
from scheduler.placement.undo import UndoLog

__all__ = [
    "ClusterState",
    "Demand",
    "Hold",
    "NodeFit",
    "Scorer",
    "UndoLog",
    "WorkloadMix",
    "diagnose",
    "explain_choice",
    "place_gang",
    "worker_gpu_share",
]
