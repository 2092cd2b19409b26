"""`shoal submit`: a job from YAML (-f) and/or flags, the command after `--`.

The scheduling flags write the job spec's fields: `--grace` its
`terminationGracePeriodSeconds`, `--preemptible/--no-preemptible`, `--gpu-type` (repeat it
for several allowed models), `--node-selector key=value` and `--toleration
key[=value]:Effect` (both repeatable; a toleration without `=value` tolerates any value of
the key, operator Exists; without `:Effect`, every effect). Flags override the file, but
`--volume KIND:SOURCE:MOUNTPATH[:ro]` (repeatable) adds a volume and its mount to the
file's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from scheduler.cli import jobs
from scheduler.cli.admin import Token, Url
from scheduler.cli.client import Api, die

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def pairs(values: list[str], flag: str) -> dict[str, str]:
    """`["a=1", "b=2"]` -> `{"a": "1", "b": "2"}`; a value without `=` is refused by name."""
    found: dict[str, str] = {}
    for v in values:
        key, eq, value = v.partition("=")
        if not eq or not key:
            die(f"{flag} {v!r}: expected KEY=VALUE")
        found[key] = value
    return found


def toleration(value: str) -> dict[str, str]:
    """`key=value:NoSchedule`, `key:NoExecute`, `key=value`, `key`, `:NoSchedule` (all
    taints of that effect) -> a Kubernetes toleration."""
    rule, colon, effect = value.rpartition(":") if ":" in value else (value, "", "")
    if colon and effect not in EFFECTS:
        die(f"--toleration {value!r}: the effect is one of {', '.join(EFFECTS)}, not {effect!r}")
    key, eq, val = rule.partition("=")
    t: dict[str, str] = {"key": key, "operator": "Equal" if eq else "Exists"}
    if eq:
        t["value"] = val
    if effect:
        t["effect"] = effect
    return t


VOLUME_KINDS = ("pvc", "secret", "configmap", "hostpath")


def volumes(values: list[str]) -> dict[str, list[dict[str, Any]]]:
    """`KIND:SOURCE:MOUNTPATH[:ro]` -> Kubernetes volumes and their mounts: `pvc:NAME`
    (a PersistentVolumeClaim), `secret:NAME`, `configmap:NAME`, `hostpath:/DIR` (the
    local backend's, under the paths its admin allows). Each volume is named after its
    mount path (/data: `data`; the local backend's SHOAL_VOLUME_DATA)."""
    out: dict[str, list[dict[str, Any]]] = {"volumes": [], "volumeMounts": []}
    names: set[str] = set()
    for value in values:
        kind, _, rest = value.partition(":")
        source, _, rest = rest.partition(":")
        path, _, flag = rest.partition(":")
        if kind not in VOLUME_KINDS or not source or not path or flag not in ("", "ro"):
            die(
                f"--volume {value!r}: expected KIND:SOURCE:MOUNTPATH[:ro], KIND one of "
                f"{', '.join(VOLUME_KINDS)} (pvc:datasets:/data, secret:creds:/etc/creds)"
            )
        name = base = re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")[:55] or "volume"
        n = 1
        while name in names:
            n += 1
            name = f"{base}-{n}"
        names.add(name)
        src = {
            "pvc": {"persistentVolumeClaim": {"claimName": source}},
            "secret": {"secret": {"secretName": source}},
            "configmap": {"configMap": {"name": source}},
            "hostpath": {"hostPath": {"path": source}},
        }[kind]
        out["volumes"].append({"name": name, **src})
        mount: dict[str, Any] = {"name": name, "mountPath": path}
        if flag:
            mount["readOnly"] = True
        out["volumeMounts"].append(mount)
    return out


# The flags' typer declarations, so that `submit`'s signature is names and defaults.
JobFile = Annotated[Path | None, typer.Option("-f", "--file", help="job YAML")]
GpuMemory = Annotated[str | None, typer.Option("--gpu-memory")]
GpuTypes = Annotated[
    list[str] | None,
    typer.Option("--gpu-type", help="an allowed GPU model (repeat it)", show_default=False),
]
Preemptible = Annotated[
    bool | None,
    typer.Option(
        "--preemptible/--no-preemptible",
        help="may be preempted (default: when over its queue's guarantee)",
        show_default=False,
    ),
]
Grace = Annotated[
    int | None,
    typer.Option(help="seconds between SIGTERM and SIGKILL when stopped (default 30)"),
]
MaxRuntime = Annotated[int | None, typer.Option("--max-runtime")]
BackoffLimit = Annotated[int | None, typer.Option("--backoff-limit")]
Env = Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE")]
NodeSelector = Annotated[
    list[str] | None,
    typer.Option("--node-selector", help="a node label KEY=VALUE (repeat it)"),
]
Tolerations = Annotated[
    list[str] | None,
    typer.Option("--toleration", help="KEY[=VALUE][:Effect] of a taint (repeat it)"),
]
Volumes = Annotated[
    list[str] | None,
    typer.Option(
        "--volume",
        "-v",
        help="KIND:SOURCE:MOUNTPATH[:ro]: pvc:NAME, secret:NAME, configmap:NAME or "
        "hostpath:/DIR mounted at MOUNTPATH (repeat it)",
    ),
]
Namespace = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        help="the Kubernetes namespace its pods run in (default: Shoal's jobs namespace)",
        show_default=False,
    ),
]
Follow = Annotated[bool, typer.Option("--follow", help="follow the logs until it ends")]


def submit(
    ctx: typer.Context,
    file: JobFile = None,
    name: str | None = None,
    queue: str | None = None,
    namespace: Namespace = None,
    workers: int | None = None,
    gpu: float | None = None,
    gpu_memory: GpuMemory = None,
    gpu_type: GpuTypes = None,
    image: str | None = None,
    framework: str | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    priority: int | None = None,
    preemptible: Preemptible = None,
    grace: Grace = None,
    max_runtime: MaxRuntime = None,
    backoff_limit: BackoffLimit = None,
    env: Env = None,
    node_selector: NodeSelector = None,
    tolerations: Tolerations = None,
    volume: Volumes = None,
    follow: Follow = False,
    url: Url = None,
    token: Token = None,
) -> None:
    """Submit a job from YAML (-f) and/or flags; the command goes after `--`.

    shoal submit --queue vision --workers 2 --gpu 0.5 --gpu-type H100 -- python train.py
    """
    flags: dict[str, Any] = {
        "name": name,
        "queue": queue,
        "namespace": namespace,
        "workers": workers,
        "gpu": gpu,
        "gpuMemory": gpu_memory,
        "gpuType": gpu_type or None,
        "image": image,
        "framework": framework,
        "cpu": cpu,
        "memory": memory,
        "priority": priority,
        "preemptible": preemptible,
        "terminationGracePeriodSeconds": grace,
        "maxRuntime": max_runtime,
        "backoffLimit": backoff_limit,
        "env": pairs(env, "--env") if env else None,
        "nodeSelector": pairs(node_selector, "--node-selector") if node_selector else None,
        "tolerations": [toleration(t) for t in tolerations] if tolerations else None,
    }
    mounts = volumes(volume) if volume else None
    body = jobs.build_spec(file, flags, list(ctx.args), more=mounts)
    api = Api(url, token)
    job = jobs.submit(api, body)
    if follow:
        raise typer.Exit(jobs.follow_logs(api, job["id"], follow=True, worker=None, attempt=None))
