"""What a local worker mounts: its processes share this host's file system, so a job's
`hostPath` volume under a prefix the admin allows (the cluster file's
`allowedHostPaths`, none by default) is given to the worker as that directory's path in
`SHOAL_VOLUME_<NAME>` (the volume's name, upper-cased, '-' as '_'; with a mount's
`subPath` joined on). Nothing is bound at the mount's `mountPath`: a process has no mount
namespace of its own here, so a script reads the variable (or takes the path as an
argument), and `readOnly` is the file system's permissions, not Shoal's.

What a process cannot be given is refused by name, by the API before anything is stored
(`spec_refusals`, a 422) and again at launch (a job stored another way): claims,
Secrets, ConfigMaps, CSI and emptyDir volumes, env values from Secrets or ConfigMaps, and
extended resources (no device plugin here). `serviceAccountName` and `imagePullSecrets`,
like `image`, mean nothing to a local process and are ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from scheduler.spec import JobSpec
from scheduler.spec import volumes as vols

Loc = tuple[str | int, ...]
ENV_PREFIX = "SHOAL_VOLUME_"
SETTING = "allowedHostPaths"


def allowed_from_file(path: str | Path | None) -> tuple[str, ...]:
    """The cluster file's `allowedHostPaths` (absolute directories), none without it."""
    if path is None:
        return ()
    data: Any = yaml.safe_load(Path(path).read_text()) or {}
    raw = data.get(SETTING, []) if isinstance(data, dict) else []
    if not isinstance(raw, list) or not all(isinstance(p, str) and p.startswith("/") for p in raw):
        raise ValueError(f"{path}: {SETTING} must be a list of absolute paths")
    return tuple(str(PurePosixPath(p)) for p in raw)


def refusals(spec: JobSpec, allowed: Sequence[str]) -> list[tuple[Loc, str]]:
    """What of `spec` local processes cannot be given, each (field, why); empty: none."""
    out: list[tuple[Loc, str]] = []
    for i, v in enumerate(spec.volumes or ()):
        if v.host_path is None:
            out.append(
                (
                    ("volumes", i, v.source),
                    f"the local backend runs workers as processes: it has no {v.source} "
                    f"volumes (a hostPath under {SETTING} is given as {ENV_PREFIX}<NAME>)",
                )
            )
        elif not vols.under(v.host_path.path, allowed):
            shown = ", ".join(allowed) or "none (the cluster file sets none)"
            out.append(
                (
                    ("volumes", i, "hostPath", "path"),
                    f"{v.host_path.path} is not under a host path the admin allows "
                    f"({SETTING} in the cluster file: {shown})",
                )
            )
    for name in spec.env_from:
        out.append(
            (
                ("env", name),
                "the local backend has no Secrets or ConfigMaps to read a value from: give "
                "the value itself",
            )
        )
    for name in spec.resources or {}:
        out.append((("resources", name), f"the local backend has no {name} to give a worker"))
    return out


def volume_env(spec: JobSpec) -> dict[str, str]:
    """`SHOAL_VOLUME_<NAME>`: the directory each mounted hostPath volume is, its
    `subPath` joined on (a volume mounted twice: the first mount's)."""
    paths = {v.name: v.host_path.path for v in spec.volumes or () if v.host_path is not None}
    env: dict[str, str] = {}
    for m in spec.volume_mounts or ():
        if m.name in paths:
            key = ENV_PREFIX + m.name.upper().replace("-", "_")
            path = PurePosixPath(paths[m.name]) / (m.sub_path or "")
            env.setdefault(key, str(path))
    return env
