"""A job's volumes, mounts, ServiceAccount, pull secrets, Secret-fed env and extended
resources through the REST API and `shoal submit` (issue 37 item 2): good shapes are
stored as written, bad ones are a 422 naming the field (the local backend's own
refusals: test_local_volumes.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import ADMIN, VISION, Shoal, job_body
from fastapi.testclient import TestClient

from scheduler.cli import submit

JOBS = "/api/v1/jobs"
PVC = {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}
AT_DATA = [{"name": "data", "mountPath": "/data"}]
SECRET_ENV = {"valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}
GOOD: dict[str, Any] = {
    "volumes": [
        PVC,
        {"name": "creds", "secret": {"secretName": "creds", "items": [{"key": "t", "path": "t"}]}},
        {"name": "cfg", "configMap": {"name": "cfg", "optional": True}},
        {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        {"name": "inline", "csi": {"driver": "csi.example.com", "readOnly": True}},
    ],
    "volumeMounts": [
        {"name": "data", "mountPath": "/data", "readOnly": True},
        {"name": "creds", "mountPath": "/etc/creds"},
        {"name": "scratch", "mountPath": "/scratch", "subPath": "a/b"},
    ],
    "serviceAccountName": "trainer",
    "imagePullSecrets": [{"name": "registry"}],
    "env": {"PLAIN": "1", "TOKEN": SECRET_ENV},
    "resources": {"example.com/rdma": 1, "hugepages-2Mi": "1Gi"},
}


def refused(client: TestClient, body: dict[str, Any]) -> list[Any]:
    r = client.post(JOBS, json=body, headers=VISION)
    assert r.status_code == 422, r.text
    assert client.get(JOBS, headers=ADMIN).json()["data"] == [], "a refused job was stored"
    detail: list[Any] = r.json()["detail"]
    return detail


def test_the_fields_are_stored_as_written(client: TestClient) -> None:
    r = client.post(JOBS, json=job_body(**GOOD), headers=VISION)
    assert r.status_code == 201, r.text
    spec = r.json()["spec"]
    for field, value in GOOD.items():
        assert spec[field] == value, field


@pytest.mark.parametrize(
    ("fields", "loc", "words"),
    [
        pytest.param(
            {"volumes": [{"name": "data"}]}, ["volumes", 0], "exactly one source", id="no-source"
        ),
        pytest.param(
            {"volumes": [{**PVC, "secret": {"secretName": "s"}}]},
            ["volumes", 0],
            "it has persistentVolumeClaim, secret",
            id="two-sources",
        ),
        pytest.param(
            {"volumes": [{"name": "Data", "emptyDir": {}}]},
            ["volumes", 0, "name"],
            "DNS-1123",
            id="name",
        ),
        pytest.param(
            {"volumes": [{"name": "podinfo", "emptyDir": {}}]},
            ["volumes", 0, "name"],
            "Shoal uses",
            id="reserved",
        ),
        pytest.param({"volumes": [PVC, PVC]}, ["volumes"], "given twice", id="twice"),
        pytest.param(
            {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "No_Such"}}]},
            ["volumes", 0, "persistentVolumeClaim", "claimName"],
            "not an object name",
            id="claim-name",
        ),
        pytest.param(
            {"volumes": [{"name": "d", "gitRepo": {"repository": "x"}}]},
            ["volumes", 0, "gitRepo"],
            "Extra inputs",
            id="unknown-source",
        ),
        pytest.param(
            {
                "volumes": [
                    {
                        "name": "s",
                        "secret": {"secretName": "s", "items": [{"key": "k", "path": "../k"}]},
                    }
                ]
            },
            ["volumes", 0, "secret", "items", 0, "path"],
            "without '..'",
            id="item-path",
        ),
        pytest.param(
            {"volumes": [{"name": "s", "emptyDir": {"sizeLimit": "lots"}}]},
            ["volumes", 0, "emptyDir", "sizeLimit"],
            "not a memory quantity",
            id="size",
        ),
        pytest.param(
            {"volumes": [{"name": "h", "hostPath": {"path": "data"}}]},
            ["volumes", 0, "hostPath", "path"],
            "absolute path",
            id="host-relative",
        ),
        pytest.param(
            {"volumes": [{"name": "h", "hostPath": {"path": "/srv/datasets/../../etc"}}]},
            ["volumes", 0, "hostPath", "path"],
            "without '..'",
            id="host-climbing-out",
        ),
        pytest.param({"volumeMounts": AT_DATA}, ["volumeMounts"], "not in volumes", id="no-volume"),
        pytest.param(
            {"volumes": [PVC], "volumeMounts": [*AT_DATA, *AT_DATA]},
            ["volumeMounts"],
            "two mounts",
            id="same-path",
        ),
        pytest.param(
            {"volumes": [PVC], "volumeMounts": [{"name": "data", "mountPath": "data"}]},
            ["volumeMounts", 0, "mountPath"],
            "absolute path",
            id="relative-mount",
        ),
        pytest.param(
            {"volumes": [PVC], "volumeMounts": [{"name": "data", "mountPath": "/etc/shoal/x"}]},
            ["volumeMounts", 0, "mountPath"],
            "/etc/shoal",
            id="shoal-path",
        ),
        pytest.param(
            {
                "volumes": [PVC],
                "volumeMounts": [{"name": "data", "mountPath": "/d", "subPath": "/abs"}],
            },
            ["volumeMounts", 0, "subPath"],
            "relative path",
            id="sub-path",
        ),
        pytest.param(
            {"serviceAccountName": "Trainer!"}, ["serviceAccountName"], "object name", id="account"
        ),
        pytest.param(
            {"imagePullSecrets": [{"name": ""}]},
            ["imagePullSecrets", 0, "name"],
            "object name",
            id="pull",
        ),
        pytest.param(
            {"env": {"T": {"valueFrom": {}}}},
            ["env", "T", "EnvFrom", "valueFrom"],
            "exactly one of",
            id="env-none",
        ),
        pytest.param(
            {"env": {"T": {"valueFrom": {"fieldRef": {"fieldPath": "x"}}}}},
            ["env", "T", "EnvFrom", "valueFrom", "fieldRef"],
            "Extra inputs",
            id="env-field",
        ),
        pytest.param({"resources": {"nvidia.com/gpu": 1}}, ["resources"], "use gpu", id="gpu"),
        pytest.param({"resources": {"memory": "1Gi"}}, ["resources"], "use memory", id="memory"),
        pytest.param(
            {"resources": {"rdma": 1}}, ["resources"], "extended resource", id="no-domain"
        ),
        pytest.param(
            {"resources": {"example.com/rdma": 0}}, ["resources"], "at least 1", id="zero"
        ),
        pytest.param(
            {"resources": {"example.com/rdma": "1Gi"}}, ["resources"], "whole number", id="quantity"
        ),
        pytest.param(
            {"resources": {"ephemeral-storage": 5}}, ["resources"], "quantity", id="storage"
        ),
    ],
)
def test_bad_shapes_are_a_422_naming_the_field(
    client: TestClient, fields: dict[str, Any], loc: list[Any], words: str
) -> None:
    detail = refused(client, job_body(**fields))
    assert any(d["loc"][1:] == loc and words in d["msg"] for d in detail), detail


@pytest.mark.parametrize(
    ("flags", "volumes", "mounts"),
    [
        (
            ["pvc:datasets:/data"],
            [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}],
            [{"name": "data", "mountPath": "/data"}],
        ),
        (
            ["secret:creds:/etc/creds:ro", "configmap:cfg:/etc/creds/x"],
            [
                {"name": "etc-creds", "secret": {"secretName": "creds"}},
                {"name": "etc-creds-x", "configMap": {"name": "cfg"}},
            ],
            [
                {"name": "etc-creds", "mountPath": "/etc/creds", "readOnly": True},
                {"name": "etc-creds-x", "mountPath": "/etc/creds/x"},
            ],
        ),
        (
            ["hostpath:/srv/a:/d", "hostpath:/srv/b:/d/"],
            [
                {"name": "d", "hostPath": {"path": "/srv/a"}},
                {"name": "d-2", "hostPath": {"path": "/srv/b"}},
            ],
            [{"name": "d", "mountPath": "/d"}, {"name": "d-2", "mountPath": "/d/"}],
        ),
    ],
)
def test_volume_flags_parse_to_kubernetes_shapes(
    flags: list[str], volumes: list[Any], mounts: list[Any]
) -> None:
    assert submit.volumes(flags) == {"volumes": volumes, "volumeMounts": mounts}


@pytest.mark.parametrize("bad", ["pvc:datasets", "nfs:x:/d", "pvc::/d", "pvc:x:/d:rw"])
def test_a_bad_volume_flag_is_refused_by_the_cli(shoal: Shoal, bad: str) -> None:
    result = shoal("submit", "--queue", "vision", "--image", "img:1", "--volume", bad)
    assert result.exit_code != 0 and "KIND:SOURCE:MOUNTPATH" in result.output, result.output


def test_shoal_submit_volume_adds_to_the_files(
    client: TestClient, shoal: Shoal, tmp_path: Path
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: train\nqueue: vision\nimage: img:1\n"
        "volumes: [{name: ds, hostPath: {path: /srv/datasets}}]\n"
        "volumeMounts: [{name: ds, mountPath: /data}]\n"
    )
    allow = {"allowed": {"hostPaths": ["/srv/datasets"]}}
    assert client.patch("/api/v1/queues/vision", json=allow, headers=ADMIN).status_code == 200
    result = shoal("submit", "-f", str(spec), "--volume", "hostpath:/srv/datasets/ckpt:/ckpt")
    assert result.exit_code == 0, result.output
    (job,) = client.get(JOBS, headers=ADMIN).json()["data"]
    assert [m["mountPath"] for m in job["spec"]["volumeMounts"]] == ["/data", "/ckpt"]


def test_shoal_submit_volume_as_the_docs_write_it(client: TestClient, shoal: Shoal) -> None:
    """docs/api.md: a claim and a Secret mounted from the command line."""
    result = shoal(
        "submit", "--queue", "vision", "--image", "img:1",
        "--volume", "pvc:datasets:/data:ro", "--volume", "secret:creds:/etc/creds",
        "--", "python", "train.py",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (job,) = client.get(JOBS, headers=ADMIN).json()["data"]
    assert job["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
        {"name": "etc-creds", "secret": {"secretName": "creds"}},
    ]
    assert job["spec"]["volumeMounts"] == [
        {"name": "data", "mountPath": "/data", "readOnly": True},
        {"name": "etc-creds", "mountPath": "/etc/creds"},
    ]
