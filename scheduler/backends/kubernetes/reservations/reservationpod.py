"""The reservation pod, as a plain JSON dict (pure): it holds one shared GPU through the
device plugin for fractional workers and reports its UUID.
"""

from __future__ import annotations

from typing import Any

from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.config import KubeConfig

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
RESERVER = ["python", "-m", "scheduler.backends.kubernetes.reservations.reserve"]
# Autoscalers and consolidation must not move a GPU that shares run on.
DO_NOT_DISRUPT = {
    "karpenter.sh/do-not-disrupt": "true",
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
}


def reservation_pod(node: str, gpu: int, config: KubeConfig) -> Obj:
    """Holds one physical GPU for fractional workers and reports its UUID. It runs the
    tiny reserver (no CLI, no kubernetes client), with memory sized from its measured
    peak (`reserve_memory_mib`), a high PriorityClass and do-not-disrupt annotations."""
    name = names.reservation_name(node, gpu)
    spec: Obj = {
        "schedulerName": config.scheduler_name,
        "restartPolicy": "Always",
        "serviceAccountName": config.reserve_service_account,
        "terminationGracePeriodSeconds": 5,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [_reserve_container(config)],
    }
    if config.reserve_image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in config.reserve_image_pull_secrets]
    if config.reserve_priority_class:
        spec["priorityClassName"] = config.reserve_priority_class
    if runtime_class := config.reservation_runtime_class:
        spec["runtimeClassName"] = runtime_class
    # It goes only where a share was placed, whose job tolerated that node's taints: it
    # tolerates them all, or a NoExecute taint only the job tolerates would evict it.
    spec["tolerations"] = [{"operator": "Exists"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": config.reservation_namespace,
            "labels": {
                **names.node_pod_labels(names.RESERVATION_COMPONENT, node),
                names.GPU_INDEX: str(gpu),
            },
            "annotations": {names.NODE: node, names.GPUS: str(gpu), **DO_NOT_DISRUPT},
        },
        "spec": spec,
    }


def _reserve_container(config: KubeConfig) -> Obj:
    """The reserver: its pod's name and namespace in its environment, and one GPU."""
    field = {"fieldRef": {"fieldPath": "metadata.name"}}
    mem = f"{config.reserve_memory_mib}Mi"
    return {
        "name": "reserve",
        "image": config.reserve_image,
        "command": list(RESERVER),
        "env": [
            {"name": "POD_NAME", "valueFrom": field},
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        ],
        "resources": {
            "requests": {"cpu": "10m", "memory": mem, GPU: "1"},
            "limits": {"memory": mem, GPU: "1"},
        },
        "securityContext": dict(config.security_context),
        # Why it found no GPU reaches its status (shares.py excludes the node).
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
