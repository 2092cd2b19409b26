"""What a job's workers mount and read beside their own fields, in Kubernetes' own shapes
(`core/v1` Volume, VolumeMount, EnvVarSource, LocalObjectReference): `volumes`,
`volumeMounts`, `imagePullSecrets`, `env` values taken from a Secret or ConfigMap, and
extended `resources`. Checked here as the API server checks a pod's, so a bad field is a
422 (or a TrainingJob condition) naming it, never a launch that fails later.

The Kubernetes backend writes them on the worker pod as given (`workerpod`); a bound
PersistentVolume's node affinity narrows the placement (`podrules.VolumeRules`). The
local backend runs processes: it takes `hostPath` volumes under the prefixes an admin
allows and `emptyDir`, each mount given to the worker as a directory in an environment
variable, and refuses the rest (`scheduler.backends.local.volumes`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from scheduler.spec.common import DNS1123_SUBDOMAIN, SpecModel, dns1123
from scheduler.spec.quantities import parse_memory_mib

# Paths and names in the worker pod that are Shoal's (`workerpod`): the downward-API
# files the launcher watches and an MPI job's hostfile. /dev/shm is Shoal's only until a
# job mounts its own there.
RESERVED_VOLUMES = frozenset({"podinfo", "hostfile", "dshm"})
RESERVED_PATHS = ("/etc/shoal",)
SHM = "/dev/shm"
MAX_VOLUMES = 64
HOST_PATH_TYPES = Literal[
    "", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice"
]
# An extended resource: a domain-prefixed name (example.com/rdma), as a device plugin
# advertises it; the native ones Shoal does not count itself, by their own names.
EXTENDED = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+/"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
NATIVE = re.compile(r"^(ephemeral-storage|hugepages-[0-9]+[KMG]i)$")
OWN_FIELDS = {"cpu": "cpu", "memory": "memory", "nvidia.com/gpu": "gpu or gpuMemory"}


class KubeShape(SpecModel):
    """A Kubernetes object's part: written back as Kubernetes writes it, unset fields
    left out (not null), in the API's answers as on the worker pod."""

    @model_serializer(mode="wrap")
    def _no_nulls(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        return {k: v for k, v in out.items() if v is not None} if isinstance(out, dict) else out


def object_name(v: str) -> str:
    """A Secret's, ConfigMap's or claim's name: a DNS-1123 subdomain."""
    if len(v) > 253 or not DNS1123_SUBDOMAIN.match(v):
        raise ValueError(
            f"{v[:80]!r} is not an object name (a DNS-1123 subdomain: lower-case letters, "
            "digits, '-' and '.')"
        )
    return v


def relative_path(v: str) -> str:
    """A path inside a volume: relative, without '..' (the API server's own rule)."""
    if not v or v.startswith("/") or ".." in PurePosixPath(v).parts:
        raise ValueError(f"{v[:80]!r} must be a relative path without '..'")
    return v


class KeyToPath(KubeShape):
    key: str = Field(min_length=1, max_length=253)
    path: str = Field(max_length=4096)
    mode: int | None = Field(default=None, ge=0, le=0o777)

    _path = field_validator("path")(lambda v: relative_path(v))


class PersistentVolumeClaimSource(KubeShape):
    claim_name: str
    read_only: bool | None = None

    _name = field_validator("claim_name")(lambda v: object_name(v))


class ConfigMapSource(KubeShape):
    name: str
    items: list[KeyToPath] | None = None
    default_mode: int | None = Field(default=None, ge=0, le=0o777)
    optional: bool | None = None

    _name = field_validator("name")(lambda v: object_name(v))


class SecretSource(KubeShape):
    secret_name: str
    items: list[KeyToPath] | None = None
    default_mode: int | None = Field(default=None, ge=0, le=0o777)
    optional: bool | None = None

    _name = field_validator("secret_name")(lambda v: object_name(v))


class EmptyDirSource(KubeShape):
    medium: Literal["", "Memory"] | None = None
    size_limit: str | None = None

    @field_validator("size_limit")
    @classmethod
    def _size(cls, v: str | None) -> str | None:
        if v is not None and parse_memory_mib(v) <= 0:
            raise ValueError("must be a positive quantity such as 10Gi")
        return v


class LocalObjectReference(KubeShape):
    name: str

    _name = field_validator("name")(lambda v: object_name(v))


class CSISource(KubeShape):
    """An inline (ephemeral) CSI volume: the driver must support the Ephemeral mode."""

    driver: str = Field(min_length=1, max_length=63)
    read_only: bool | None = None
    fs_type: str | None = None
    volume_attributes: dict[str, str] | None = None
    node_publish_secret_ref: LocalObjectReference | None = None

    _driver = field_validator("driver")(lambda v: object_name(v))


def under(path: str, prefixes: Sequence[str]) -> bool:
    """Whether `path` is one of `prefixes` or inside one (by whole path components; a
    `..` never climbs out of one: such a path is under none)."""
    parts = PurePosixPath(path).parts
    return ".." not in parts and any(
        parts[: len(PurePosixPath(p).parts)] == PurePosixPath(p).parts for p in prefixes
    )


class HostPathSource(KubeShape):
    """A node's directory: refused unless an admin allows its prefix (the local backend's
    `allowedHostPaths`; on Kubernetes, the admins' limits)."""

    path: str = Field(min_length=1, max_length=4096)
    type: HOST_PATH_TYPES | None = None

    @field_validator("path")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/") or ".." in PurePosixPath(v).parts or "\x00" in v:
            raise ValueError(f"{v[:80]!r} must be an absolute path without '..'")
        return v


SOURCES = ("persistentVolumeClaim", "configMap", "secret", "emptyDir", "csi", "hostPath")


class Volume(KubeShape):
    """One pod volume with exactly one source."""

    name: str = Field(min_length=1, max_length=63)
    persistent_volume_claim: PersistentVolumeClaimSource | None = None
    config_map: ConfigMapSource | None = None
    secret: SecretSource | None = None
    empty_dir: EmptyDirSource | None = None
    csi: CSISource | None = None
    host_path: HostPathSource | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        dns1123(v)
        if v in RESERVED_VOLUMES:
            raise ValueError(f"{v!r} is a volume name Shoal uses in every worker pod")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> Volume:
        given = [s for s in SOURCES if getattr(self, _attr(s)) is not None]
        if len(given) != 1:
            raise ValueError(
                f"volume {self.name!r} must have exactly one source of "
                f"{', '.join(SOURCES)}; it has {', '.join(given) or 'none'}"
            )
        return self

    @property
    def source(self) -> str:
        """Its source's field name (camelCase, as written)."""
        return next(s for s in SOURCES if getattr(self, _attr(s)) is not None)


def _attr(camel: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)


class VolumeMount(KubeShape):
    name: str = Field(min_length=1, max_length=63)
    mount_path: str = Field(min_length=1, max_length=4096)
    read_only: bool | None = None
    sub_path: str | None = None

    @field_validator("mount_path")
    @classmethod
    def _mount_path(cls, v: str) -> str:
        if not v.startswith("/") or ":" in v or "\x00" in v:
            raise ValueError(f"{v[:80]!r} must be an absolute path without ':'")
        if any(v == p or v.startswith(p + "/") for p in RESERVED_PATHS):
            raise ValueError(f"{v!r} is under /etc/shoal, where Shoal mounts its own files")
        return v.rstrip("/") or "/"

    _sub = field_validator("sub_path")(lambda v: v if v is None else relative_path(v))


class KeyRef(KubeShape):
    name: str
    key: str = Field(min_length=1, max_length=253)
    optional: bool | None = None

    _name = field_validator("name")(lambda v: object_name(v))


class EnvVarSource(KubeShape):
    secret_key_ref: KeyRef | None = None
    config_map_key_ref: KeyRef | None = None

    @model_validator(mode="after")
    def _one(self) -> EnvVarSource:
        if (self.secret_key_ref is None) == (self.config_map_key_ref is None):
            raise ValueError("give exactly one of secretKeyRef or configMapKeyRef")
        return self


class EnvFrom(KubeShape):
    """An `env` value read from a Secret or ConfigMap when the worker starts."""

    value_from: EnvVarSource


def unique_names(volumes: list[Volume]) -> None:
    names = [v.name for v in volumes]
    if dup := sorted({n for n in names if names.count(n) > 1}):
        raise ValueError(f"the volume name {dup[0]!r} is given twice")


def check_mounts(volumes: list[Volume], mounts: list[VolumeMount]) -> None:
    """Every mount names a volume; no two mounts at one path."""
    names = [v.name for v in volumes]
    paths = [m.mount_path for m in mounts]
    if dup := sorted({p for p in paths if paths.count(p) > 1}):
        raise ValueError(f"two mounts at {dup[0]!r}")
    for i, m in enumerate(mounts):
        if m.name not in names:
            raise ValueError(
                f"mount {i} names volume {m.name!r}, which is not in volumes "
                f"({', '.join(names) or 'none'})"
            )


def resource(name: str, value: int | str) -> int | str:
    """One extended or native resource a worker requests (and is limited to)."""
    if name in OWN_FIELDS:
        raise ValueError(f"{name} has its own field: use {OWN_FIELDS[name]}")
    if NATIVE.match(name):
        if not isinstance(value, str) or parse_memory_mib(value) <= 0:
            raise ValueError(f"{name} takes a positive quantity such as '10Gi'")
        return value
    if not EXTENDED.match(name) or name.split("/", 1)[0].endswith("kubernetes.io"):
        raise ValueError(
            f"{name[:80]!r} is no resource a worker can request: an extended resource "
            "(domain/name, such as example.com/rdma), ephemeral-storage or hugepages-<size>"
        )
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} takes a whole number of at least 1 (extended resources)")
    return value
