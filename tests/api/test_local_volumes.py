"""The local backend's volumes (issue 37 item 2): a hostPath under the cluster file's
`allowedHostPaths` (none by default) is taken and given to the worker as
SHOAL_VOLUME_<NAME>; what a process cannot be given (claims, Secrets, env from them,
extended resources) is a 422 naming the field before anything is stored, through the
API wired to a real `LocalBackend` as `shoal serve` wires it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ADMIN, VISION, job_body
from fastapi.testclient import TestClient

from api.services import Wiring
from scheduler.backends.local import LocalBackend
from scheduler.backends.local import volumes as local_volumes
from scheduler.model import Node
from scheduler.spec import JobSpec
from scheduler.spec import volumes as vols

JOBS = "/api/v1/jobs"
PVC = {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}
SECRET_ENV = {"valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}


def refused(client: TestClient, body: dict[str, Any]) -> list[Any]:
    r = client.post(JOBS, json=body, headers=VISION)
    assert r.status_code == 422, r.text
    assert client.get(JOBS, headers=ADMIN).json()["data"] == [], "a refused job was stored"
    detail: list[Any] = r.json()["detail"]
    return detail


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalBackend]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("allowedHostPaths: [/srv/datasets]\n")
    backend = LocalBackend(
        tmp_path / "state",
        nodes=[Node("n1", 8000, 32768, gpu_count=4, gpu_memory_mib=81920)],
        cluster_file=cluster,
        run_dir=tmp_path / "run",
    )
    yield backend
    backend.close()


@pytest.fixture
def wiring(local: LocalBackend) -> Wiring:
    return Wiring(spec_refusals=local)


HOST = {"name": "ds", "hostPath": {"path": "/srv/datasets/imagenet"}}


def test_the_local_backend_takes_an_allowed_host_path(client: TestClient) -> None:
    """Allowed twice: by the queue (where a job may mount from, on any backend) and by
    the cluster file (what this machine gives processes)."""
    body = job_body(volumes=[HOST], volumeMounts=[{"name": "ds", "mountPath": "/data"}])
    assert "allowed.hostPaths" in str(refused(client, body))
    allow = {"allowed": {"hostPaths": ["/srv/datasets"]}}
    assert client.patch("/api/v1/queues/vision", json=allow, headers=ADMIN).status_code == 200
    body = job_body(volumes=[HOST], volumeMounts=[{"name": "ds", "mountPath": "/data"}])
    assert client.post(JOBS, json=body, headers=VISION).status_code == 201


@pytest.mark.parametrize(
    ("fields", "loc", "words"),
    [
        pytest.param(
            {"volumes": [PVC]},
            ["volumes", 0, "persistentVolumeClaim"],
            "no persistentVolumeClaim volumes",
            id="pvc",
        ),
        pytest.param(
            {"volumes": [{"name": "h", "hostPath": {"path": "/srv/datasets-other"}}]},
            ["volumes", 0, "hostPath", "path"],
            "allowedHostPaths in the cluster file: /srv/datasets",
            id="outside",
        ),
        pytest.param(
            {"env": {"T": SECRET_ENV}}, ["env", "T"], "no Secrets or ConfigMaps", id="env"
        ),
        pytest.param(
            {"resources": {"example.com/rdma": 1}},
            ["resources", "example.com/rdma"],
            "no example.com/rdma",
            id="rdma",
        ),
    ],
)
def test_the_local_backend_refuses_what_a_process_cannot_have(
    client: TestClient, fields: dict[str, Any], loc: list[Any], words: str
) -> None:
    detail = refused(client, job_body(**fields))
    assert [(d["loc"][1:], words in d["msg"]) for d in detail] == [(loc, True)], detail


def test_no_host_path_is_allowed_by_default(tmp_path: Path) -> None:
    spec = JobSpec.model_validate(job_body(volumes=[HOST]))
    assert "none (the cluster file sets none)" in local_volumes.refusals(spec, ())[0][1]
    assert local_volumes.allowed_from_file(None) == ()
    assert vols.under("/srv/datasets/x", ["/srv/datasets"])
    assert vols.under("/srv/datasets", ["/srv/datasets/"])
    assert not vols.under("/srv/datasets2", ["/srv/datasets"])


def test_a_local_worker_gets_each_host_path_mount_as_a_variable() -> None:
    spec = JobSpec.model_validate(
        job_body(
            volumes=[HOST, {"name": "my-out", "hostPath": {"path": "/srv/out"}}],
            volumeMounts=[
                {"name": "ds", "mountPath": "/data", "subPath": "train"},
                {"name": "my-out", "mountPath": "/out"},
            ],
        )
    )
    assert local_volumes.volume_env(spec) == {
        "SHOAL_VOLUME_DS": "/srv/datasets/imagenet/train",
        "SHOAL_VOLUME_MY_OUT": "/srv/out",
    }
