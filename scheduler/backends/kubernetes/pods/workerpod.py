"""A job's worker pod, as a plain JSON dict (pure; validated by the tests against the
official schemas): its container, environment, volumes, labels and where it may run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from scheduler.backends import base, workerenv
from scheduler.backends.kubernetes import names, nodepool
from scheduler.backends.kubernetes.config import KubeConfig
from scheduler.backends.kubernetes.pods.objectmeta import is_fractional, job_labels, object_meta
from scheduler.backends.kubernetes.reservations import fractioncharge
from scheduler.model import WorkerPlacement
from scheduler.spec import Framework, JobSpec
from scheduler.spec import volumes as vols
from scheduler.worker import checkin

Obj = dict[str, Any]
PREEMPT_FILE = "/etc/shoal/podinfo/preempted"
STOP_FILE = "/etc/shoal/podinfo/stop-reason"
GPU = "nvidia.com/gpu"
SHARE_CHECK_COMMAND = ["python", "-m", "scheduler.worker.checkin"]


def worker_pod(
    req: base.LaunchRequest,
    p: WorkerPlacement,
    base_name: str,
    ns: str,
    hosts: Sequence[str],
    config: KubeConfig,
    *,
    replica: bool = False,
    dra: base.Enforcement | None = None,
) -> Obj:
    """One worker. Whole GPUs: `nvidia.com/gpu: N` (the device plugin then picks and
    exposes them). A fraction: no GPU request but its share in `shoal.dev/gpu-milli`
    (`fractioncharge`: what the namespace's quota counts); NVIDIA_VISIBLE_DEVICES comes from the
    pod's `shoal.dev/gpu-device` annotation (the reservation's UUID, or its CDI name),
    which Shoal sets before it binds the worker (the kubelet resolves it when the
    container starts; the NVIDIA runtime, `config.runtime_class`, reads it). A
    fraction on a node that shares GPUs by MPS (`replica`): `nvidia.com/gpu: 1`, one
    replica, which the device plugin picks, exposes and enforces. On a node whose GPUs
    a DRA driver publishes (`dra`: how a fraction is held there), whole GPUs and
    fractions alike come from the ResourceClaim `names.claim_name(pod)`, which Shoal
    allocates before the bind; the driver exposes the devices (CDI)."""
    spec = req.spec
    name = names.pod_name(base_name, req.attempt, p.worker)
    # Who hands a fraction its GPU: the device plugin (an MPS replica), the DRA driver,
    # or (None) Shoal's reservation through the pod's annotation.
    device = base.Enforcement.MPS if replica else dra
    container = _worker_container(req, p, hosts, config, device)
    volumes = _worker_volumes(req, base_name, container)
    own_shm = any(m.mount_path == vols.SHM for m in spec.volume_mounts or ())
    if p.gpus and not own_shm and (shm := shm_mib(req, config)):
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
    if any(e["name"] == checkin.CHECKED_ENV for e in container["env"]):
        pod_spec["initContainers"] = [share_check_container(container["env"], spec, config)]
    _add_placement_fields(pod_spec, req, config, ns)
    labels, ann = _worker_marks(req, p, base_name, replica)
    if dra is not None and p.gpus:
        claim = names.claim_name(name)
        pod_spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        resources = container["resources"]
        for part in ("requests", "limits"):
            resources[part].pop(GPU, None)
        resources["claims"] = [{"name": "gpu"}]
        ann[names.DRA_CLAIM] = claim
        labels.pop(names.RESERVATION, None)
        if is_fractional(p):
            ann[names.ENFORCEMENT] = str(dra)
            ann.pop(names.GPU_REPLICA, None)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": object_meta(name, ns, labels, req, ann),
        "spec": pod_spec,
    }


def _add_placement_fields(
    pod_spec: Obj, req: base.LaunchRequest, config: KubeConfig, ns: str
) -> None:
    """Where it may run, as placement judged it (the kubelet checks the same fields),
    its priority, runtime class and service account."""
    spec = req.spec
    own = [
        t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in spec.tolerations or []
    ]
    # Every worker tolerates the pool's taint: Shoal's pool is its own room (`nodepool`).
    pod_spec["tolerations"] = [
        *(dict(t) for t in config.tolerations),
        *own,
        nodepool.toleration(config),
    ]
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
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [_dump(s) for s in spec.image_pull_secrets]
    # The job's own account (its token mounted: the job asked for its RBAC), else the
    # chart's worker account, which is in the jobs namespace only.
    chart_account = config.service_account if ns == config.namespace else None
    if account := spec.service_account_name or chart_account:
        pod_spec["serviceAccountName"] = account
    else:  # the namespace's default account: its token is of no use to a worker
        pod_spec["automountServiceAccountToken"] = False


def shm_mib(req: base.LaunchRequest, config: KubeConfig) -> int:
    """The size of a GPU worker's /dev/shm (MiB; 0: none): `config.shm_mib`, or half the
    worker's memory (a memory-backed emptyDir counts against the memory limit)."""
    if config.shm_mib is not None:
        return max(0, config.shm_mib)
    return req.spec.memory_mib // 2


def _worker_env(
    req: base.LaunchRequest,
    p: WorkerPlacement,
    hosts: Sequence[str],
    device: base.Enforcement | None,
) -> list[Obj]:
    """The container's environment; a reserved fraction's GPU comes from the pod's
    annotation, whole GPUs', an MPS replica's and a DRA claim's from the device's
    plugin or driver (`device`: how that holds a fraction)."""
    frac = is_fractional(p) and device is None
    how = device or base.Enforcement.ADVISORY
    env = workerenv.worker_env(
        req.spec, p, hosts, job_id=req.job_id, attempt=req.attempt, enforcement=how
    )
    env.update(req.extra_env)
    env["SHOAL_PREEMPT_FILE"] = PREEMPT_FILE
    env["SHOAL_STOP_FILE"] = STOP_FILE
    if p.gpus and not frac:
        env.pop("NVIDIA_VISIBLE_DEVICES")  # the device plugin sets it
    if frac:  # only a reservation's share checks in: its GPU comes by the variable alone
        env[checkin.RESERVATION_ENV] = names.reservation_name(p.node, p.gpus[0])
    env.pop(checkin.CHECKED_ENV, None)  # Shoal's to set, not a job's
    if checkin.checks(env):  # the init container checks, the launcher need not
        env[checkin.CHECKED_ENV] = names.SHARE_CHECK
    env_list: list[Obj] = [
        {"name": k, "value": v}
        for k, v in sorted(env.items())
        if not (frac and k == "NVIDIA_VISIBLE_DEVICES")
    ]
    # A job's values from Secrets and ConfigMaps, save the names Shoal sets (its own
    # variables win over the job's, as its plain values do in `workerenv`).
    taken = {e["name"] for e in env_list} | ({"NVIDIA_VISIBLE_DEVICES"} if frac else set())
    env_list.extend(
        {"name": k, "valueFrom": _dump(source)}
        for k, source in sorted(req.spec.env_from.items())
        if k not in taken
    )
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
    device: base.Enforcement | None,
) -> Obj:
    spec = req.spec
    requests: Obj = {"cpu": f"{spec.cpu_milli}m", "memory": f"{spec.memory_mib}Mi"}
    limits: Obj = {"memory": f"{spec.memory_mib}Mi"}
    if p.gpus and (device is not None or not is_fractional(p)):
        requests[GPU] = limits[GPU] = str(len(p.gpus))  # an MPS replica: one
    elif p.gpus:  # a reservation's share, charged in the job's namespace
        share = fractioncharge.milli(p.fraction)
        requests[fractioncharge.RESOURCE] = limits[fractioncharge.RESOURCE] = str(share)
    for resource, amount in (spec.resources or {}).items():
        # Extended resources must be requested as limited (hugepages need a limit too).
        requests[resource] = limits[resource] = str(amount)
    ports = [{"name": "rendezvous", "containerPort": workerenv.MASTER_PORT}]
    if spec.framework is Framework.TENSORFLOW:
        ports.append({"name": "tf", "containerPort": workerenv.MASTER_PORT + 1 + p.worker})
    container: Obj = {
        "name": "worker",
        "image": spec.image,
        "env": _worker_env(req, p, hosts, device),
        "ports": ports,
        "resources": {"requests": requests, "limits": limits},
        "securityContext": dict(config.security_context),
        "volumeMounts": [
            {"name": "podinfo", "mountPath": "/etc/shoal/podinfo"},
            *(_dump(m) for m in spec.volume_mounts or ()),
        ],
    }
    if spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    return container


def share_check_container(worker_env: list[Obj], spec: JobSpec, config: KubeConfig) -> Obj:
    """The init container that checks a reservation's share sees its GPU before the
    job's command starts, whatever that command is (`checkin`; its exit 75 and message
    are read by `status.share_check_failure`). It runs Shoal's image, which the node
    has already (the reservation pod beside it runs it), with the worker's NVIDIA_*
    variables (the GPU's, resolved from the same annotation) in the same pod, so the
    same RuntimeClass: the runtime treats it as it treats the worker. Not the job's
    other variables: a PYTHONHOME or PYTHONPATH of the job's must not break Shoal's
    Python. Its requests never exceed the worker's, so the pod asks no more of a node
    than placement counted (a pod's request is the larger of its init containers' and
    the sum of its containers')."""
    keep = {checkin.RESERVATION_ENV, "SHOAL_GPU_FRACTION"}
    env = [dict(e) for e in worker_env if e["name"].startswith("NVIDIA_") or e["name"] in keep]
    env.append({"name": "PYTHONDONTWRITEBYTECODE", "value": "1"})
    cpu = min(10, spec.cpu_milli)
    memory = min(config.reserve_memory_mib, spec.memory_mib)
    return {
        "name": names.SHARE_CHECK,
        "image": config.reserve_image,
        # Present on the node already: never pull (`:latest` would mean Always).
        "imagePullPolicy": "IfNotPresent",
        "command": list(SHARE_CHECK_COMMAND),
        "env": env,
        "resources": {
            "requests": {"cpu": f"{cpu}m", "memory": f"{memory}Mi"},
            "limits": {"memory": f"{memory}Mi"},
        },
        "securityContext": dict(config.security_context),
        # Why it saw no GPU reaches the pod's status (status.share_check_failure).
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _dump(model: BaseModel) -> Obj:
    """A spec's Kubernetes-shaped part as the pod writes it (camelCase, unset left out)."""
    out: Obj = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return out


def _worker_volumes(req: base.LaunchRequest, base_name: str, container: Obj) -> list[Obj]:
    """The downward-API files the launcher watches (preempted, stop reason), the job's
    own volumes, and an MPI job's hostfile (mounted into `container` too)."""
    preempted = {"fieldPath": f"metadata.annotations['{names.PREEMPTED}']"}
    stop_reason = {"fieldPath": f"metadata.annotations['{names.STOP_REASON}']"}
    items = [
        {"path": "preempted", "fieldRef": preempted},
        {"path": "stop-reason", "fieldRef": stop_reason},
    ]
    volumes: list[Obj] = [{"name": "podinfo", "downwardAPI": {"items": items}}]
    volumes.extend(_dump(v) for v in req.spec.volumes or ())
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
