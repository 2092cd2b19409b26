"""The objects one launch creates, as plain JSON dicts (pure; validated by the tests
against the official schemas): a headless Service, an MPI hostfile ConfigMap, worker
pods, and the reservation pod that holds a shared GPU through the device plugin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.backends import base, workerenv
from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.config import KubeConfig
from scheduler.model import EPS, WorkerPlacement
from scheduler.spec import TRAININGJOB, Framework

Obj = dict[str, Any]
PREEMPT_FILE = "/etc/shoal/podinfo/preempted"
STOP_FILE = "/etc/shoal/podinfo/stop-reason"
GPU = "nvidia.com/gpu"


def is_fractional(p: WorkerPlacement) -> bool:
    return len(p.gpus) == 1 and p.fraction < 1 - EPS


def owner_refs(req: base.LaunchRequest, ns: str) -> list[Obj]:
    """The TrainingJob the job was submitted as, when it can own objects in `ns` (it has
    a uid, and owner references cannot cross namespaces)."""
    owner = req.owner
    if owner is None or owner.kind != TRAININGJOB or not owner.uid or owner.namespace != ns:
        return []
    return [
        {
            "apiVersion": "shoal.dev/v1alpha1",
            "kind": owner.kind,
            "name": owner.name,
            "uid": owner.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def job_labels(req: base.LaunchRequest, base_name: str, component: str) -> dict[str, str]:
    return {
        names.NAME: "shoal",
        names.INSTANCE: base_name,
        names.COMPONENT: component,
        names.MANAGED_BY: names.SHOAL,
        names.JOB: names.label_value(req.job_id),
        names.QUEUE: req.spec.queue,
        names.ATTEMPT: str(req.attempt),
    }


def _meta(
    name: str,
    ns: str,
    labels: Mapping[str, str],
    req: base.LaunchRequest,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": ns,
        "labels": dict(labels),
        "annotations": {names.JOB_ID: req.job_id, **(annotations or {})},
    }
    if refs := owner_refs(req, ns):
        meta["ownerReferences"] = refs
    return meta


def service(req: base.LaunchRequest, base_name: str, ns: str) -> Obj:
    labels = job_labels(req, base_name, names.RENDEZVOUS)
    labels.pop(names.ATTEMPT)  # one Service serves every attempt
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(base_name, ns, labels, req),
        "spec": {
            "clusterIP": "None",
            "selector": {names.JOB: names.label_value(req.job_id), names.COMPONENT: names.WORKER},
            "publishNotReadyAddresses": True,  # rendezvous happens before readiness
            "ports": [{"name": "rendezvous", "port": workerenv.MASTER_PORT}],
        },
    }


def hostfile(req: base.LaunchRequest, base_name: str, ns: str, hosts: Sequence[str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(
            names.hostfile_name(base_name, req.attempt),
            ns,
            job_labels(req, base_name, names.HOSTFILE),
            req,
        ),
        "data": {
            "hostfile": workerenv.hostfile_text(
                hosts,
                [workerenv.mpi_slots(p) for p in sorted(req.placements, key=lambda p: p.worker)],
            )
        },
    }


def worker_pod(
    req: base.LaunchRequest,
    p: WorkerPlacement,
    base_name: str,
    ns: str,
    hosts: Sequence[str],
    config: KubeConfig,
    *,
    replica: bool = False,
) -> Obj:
    """One worker. Whole GPUs: `nvidia.com/gpu: N` (the device plugin then picks and
    exposes them). A fraction: no GPU request; NVIDIA_VISIBLE_DEVICES comes from the
    pod's `shoal.dev/gpu-device` annotation (the reservation's UUID, or its CDI name),
    which Shoal sets before it binds the worker (the kubelet resolves it when the
    container starts; the NVIDIA runtime, `config.runtime_class`, reads it). A
    fraction on a node that shares GPUs by MPS (`replica`): `nvidia.com/gpu: 1`, one
    replica, which the device plugin picks, exposes and enforces."""
    spec = req.spec
    name = names.pod_name(base_name, req.attempt, p.worker)
    container = _worker_container(req, p, hosts, config, replica)
    volumes = _worker_volumes(req, base_name, container)
    if p.gpus and (shm := shm_mib(req, config)):
        container["volumeMounts"].append({"name": "dshm", "mountPath": "/dev/shm"})
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm}Mi"}})
    pod_spec: Obj = {
        "schedulerName": config.scheduler_name,
        "restartPolicy": "Never",  # Shoal retries with a new attempt (backoffLimit)
        "hostname": name,
        "subdomain": base_name,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": spec.termination_grace_period_seconds,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": volumes,
    }
    # Where it may run, as placement judged it: the kubelet checks the same fields.
    own = [
        t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in spec.tolerations or []
    ]
    if tolerations := [dict(t) for t in config.tolerations] + own:
        pod_spec["tolerations"] = tolerations
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.affinity is not None:
        pod_spec["affinity"] = spec.affinity.model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
    if priority_class := spec.priority_class_name or config.priority_class:
        pod_spec["priorityClassName"] = priority_class
    if config.runtime_class:  # the NVIDIA runtime, where it is not the default
        pod_spec["runtimeClassName"] = config.runtime_class
    if config.service_account:
        pod_spec["serviceAccountName"] = config.service_account
    else:  # the namespace's default account: its token is of no use to a worker
        pod_spec["automountServiceAccountToken"] = False
    labels, ann = _worker_marks(req, p, base_name, replica)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(name, ns, labels, req, ann),
        "spec": pod_spec,
    }


def shm_mib(req: base.LaunchRequest, config: KubeConfig) -> int:
    """The size of a GPU worker's /dev/shm (MiB; 0: none): `config.shm_mib`, or half the
    worker's memory (a memory-backed emptyDir counts against the memory limit)."""
    if config.shm_mib is not None:
        return max(0, config.shm_mib)
    return req.spec.memory_mib // 2


def _worker_env(
    req: base.LaunchRequest, p: WorkerPlacement, hosts: Sequence[str], replica: bool
) -> list[Obj]:
    """The container's environment; a reserved fraction's GPU comes from the pod's
    annotation, whole GPUs' and an MPS replica's from the device plugin."""
    frac = is_fractional(p) and not replica
    how = base.Enforcement.MPS if replica else base.Enforcement.ADVISORY
    env = workerenv.worker_env(
        req.spec, p, hosts, job_id=req.job_id, attempt=req.attempt, enforcement=how
    )
    env.update(req.extra_env)
    env["SHOAL_PREEMPT_FILE"] = PREEMPT_FILE
    env["SHOAL_STOP_FILE"] = STOP_FILE
    if p.gpus and not frac:
        env.pop("NVIDIA_VISIBLE_DEVICES")  # the device plugin sets it
    env_list: list[Obj] = [
        {"name": k, "value": v}
        for k, v in sorted(env.items())
        if not (frac and k == "NVIDIA_VISIBLE_DEVICES")
    ]
    if frac:
        env_list.append(
            {
                "name": "NVIDIA_VISIBLE_DEVICES",
                "valueFrom": {
                    "fieldRef": {"fieldPath": f"metadata.annotations['{names.GPU_DEVICE}']"}
                },
            }
        )
    return env_list


def _worker_container(
    req: base.LaunchRequest,
    p: WorkerPlacement,
    hosts: Sequence[str],
    config: KubeConfig,
    replica: bool,
) -> Obj:
    spec = req.spec
    requests: Obj = {"cpu": f"{spec.cpu_milli}m", "memory": f"{spec.memory_mib}Mi"}
    limits: Obj = {"memory": f"{spec.memory_mib}Mi"}
    if p.gpus and (replica or not is_fractional(p)):
        requests[GPU] = limits[GPU] = str(len(p.gpus))  # an MPS replica: one
    ports = [{"name": "rendezvous", "containerPort": workerenv.MASTER_PORT}]
    if spec.framework is Framework.TENSORFLOW:
        ports.append({"name": "tf", "containerPort": workerenv.MASTER_PORT + 1 + p.worker})
    container: Obj = {
        "name": "worker",
        "image": spec.image,
        "env": _worker_env(req, p, hosts, replica),
        "ports": ports,
        "resources": {"requests": requests, "limits": limits},
        "securityContext": dict(config.security_context),
        "volumeMounts": [{"name": "podinfo", "mountPath": "/etc/shoal/podinfo"}],
    }
    if spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    return container


def _worker_volumes(req: base.LaunchRequest, base_name: str, container: Obj) -> list[Obj]:
    """The downward-API files the launcher watches (preempted, stop reason), and an MPI
    job's hostfile (mounted into `container` too)."""
    preempted = {"fieldPath": f"metadata.annotations['{names.PREEMPTED}']"}
    stop_reason = {"fieldPath": f"metadata.annotations['{names.STOP_REASON}']"}
    items = [
        {"path": "preempted", "fieldRef": preempted},
        {"path": "stop-reason", "fieldRef": stop_reason},
    ]
    volumes: list[Obj] = [{"name": "podinfo", "downwardAPI": {"items": items}}]
    if req.spec.framework is Framework.MPI:
        container["volumeMounts"].append(
            {"name": "hostfile", "mountPath": "/etc/shoal/hostfile", "subPath": "hostfile"}
        )
        volumes.append(
            {"name": "hostfile", "configMap": {"name": names.hostfile_name(base_name, req.attempt)}}
        )
    return volumes


def _worker_marks(
    req: base.LaunchRequest, p: WorkerPlacement, base_name: str, replica: bool
) -> tuple[dict[str, str], dict[str, str]]:
    """The worker's labels and annotations: where it is bound, and a fraction's share."""
    labels = job_labels(req, base_name, names.WORKER)
    labels[names.WORKER_INDEX] = str(p.worker)
    ann = {
        names.NODE: p.node,
        names.GPUS: names.gpus_text(p.gpus),
        names.WORKERS: str(len(req.placements)),
    }
    if not is_fractional(p):
        return labels, ann
    ann[names.GPU_FRACTION] = f"{p.fraction:.4f}"
    if replica:  # one MPS replica of the device plugin: enforced, no reservation
        ann[names.ENFORCEMENT] = str(base.Enforcement.MPS)
        ann[names.GPU_REPLICA] = "1"
    else:
        ann[names.ENFORCEMENT] = str(base.Enforcement.ADVISORY)
        labels[names.RESERVATION] = names.reservation_name(p.node, p.gpus[0])
    return labels, ann


RESERVER = ["python", "-m", "scheduler.backends.kubernetes.reserve"]
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
    field = {"fieldRef": {"fieldPath": "metadata.name"}}
    mem = f"{config.reserve_memory_mib}Mi"
    spec: Obj = {
        "schedulerName": config.scheduler_name,
        "restartPolicy": "Always",
        "serviceAccountName": config.reserve_service_account,
        "terminationGracePeriodSeconds": 5,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
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
        ],
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
                names.NAME: "shoal",
                names.COMPONENT: names.RESERVATION_COMPONENT,
                names.MANAGED_BY: names.SHOAL,
                names.NODE_LABEL: names.label_value(node),
                names.GPU_INDEX: str(gpu),
            },
            "annotations": {names.NODE: node, names.GPUS: str(gpu), **DO_NOT_DISRUPT},
        },
        "spec": spec,
    }
