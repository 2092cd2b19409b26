"""Dynamic Resource Allocation (resource.k8s.io/v1) for the kubernetes backend.

The device layer is pure: objects come in as the API server returns them (plain dicts,
camelCase), and nothing of it talks to the cluster. Its layers, bottom up (quantities are
`scheduler.spec.quantities`): devices and counters read from ResourceSlices; the CEL
environment and DeviceClass selectors; what claims already hold; the per-node GPU view;
the choice of devices for one worker. `claimobjects` builds a worker's ResourceClaim
(pure too); `draclaims`, the one module here that talks to the cluster, offers each
node's devices to the loop and allocates the claims of Shoal's workers.
"""

from scheduler.backends.kubernetes.dra.choose import Choice, Pick, Unfit, choose, offered
from scheduler.backends.kubernetes.dra.claimfit import Request, nodes_for, pick, requests_of
from scheduler.backends.kubernetes.dra.devices import (
    Device,
    Inventory,
    RequestPolicy,
    Version,
    qualified,
    read_slices,
    split_qualified,
)
from scheduler.backends.kubernetes.dra.gpus import GpuDevice, NodeGpus, is_mig, node_gpus
from scheduler.backends.kubernetes.dra.overbooked import overbooked
from scheduler.backends.kubernetes.dra.selectors import (
    DeviceClasses,
    Selector,
    SelectorError,
    compile_selectors,
)
from scheduler.backends.kubernetes.dra.usage import Usage, results

__all__ = [
    "Choice",
    "Device",
    "DeviceClasses",
    "GpuDevice",
    "Inventory",
    "NodeGpus",
    "Pick",
    "Request",
    "RequestPolicy",
    "Selector",
    "SelectorError",
    "Unfit",
    "Usage",
    "Version",
    "choose",
    "compile_selectors",
    "is_mig",
    "node_gpus",
    "nodes_for",
    "offered",
    "overbooked",
    "pick",
    "qualified",
    "read_slices",
    "requests_of",
    "results",
    "split_qualified",
]
