"""Issue 25 item 4: `GET /jobs/{id}/logs` answers a 422 naming the parameter for an offset
past any file (2^63-1 was a 500: the seek overflowed) or below zero (it answered 200 with
a `nextOffset` that never advanced), and for an attempt of 400 digits (echoed back)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ADMIN, VIEWER, VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.services import Wiring

J = "/api/v1/jobs"


class Files:
    def __init__(self, root: Path) -> None:
        self.root = root

    def log_files(self, job_id: str) -> list[tuple[int, int, Path]]:
        found = []
        for w in range(2):
            path = self.root / f"{job_id}-{w}.log"
            path.write_bytes(b"hello\n" * 10)
            found.append((1, w, path))
        return found


@pytest.fixture
def wiring(tmp_path: Path) -> Wiring:
    return Wiring(log_source=Files(tmp_path))


@pytest.fixture
def job(app: FastAPI, client: TestClient) -> Iterator[str]:
    r = client.post(J, json=job_body(), headers=VISION)
    assert r.status_code == 201, r.text
    yield r.json()["id"]


@pytest.mark.parametrize(
    "offsets",
    [
        "9223372036854775807",
        "0,9223372036854775808",
        str(2**64),
        "-1",
        "0,-5",
        "1e3",
        "",
        "9" * 400,
    ],
)
def test_offsets_out_of_range_are_422_naming_offsets(
    client: TestClient, job: str, offsets: str
) -> None:
    for headers in (ADMIN, VISION, VIEWER):
        r = client.get(f"{J}/{job}/logs", params={"offsets": offsets or ","}, headers=headers)
        assert r.status_code == 422, (offsets, r.text)
        d = r.json()["detail"][0]
        assert d["loc"] == ["query", "offsets"], d


def test_good_offsets_advance(client: TestClient, job: str) -> None:
    r = client.get(f"{J}/{job}/logs", params={"offsets": "0,54"}, headers=VISION)
    assert r.status_code == 200, r.text
    chunks = r.json()["chunks"]
    assert [(c["offset"], c["nextOffset"]) for c in chunks] == [(0, 60), (54, 60)]
    r = client.get(f"{J}/{job}/logs", params={"offsets": "100,60"}, headers=VISION)
    assert [c["text"] for c in r.json()["chunks"]] == ["", ""]


@pytest.mark.parametrize("attempt", ["9" * 400, str(2**31), "-1"])
def test_an_attempt_out_of_range_is_422(client: TestClient, job: str, attempt: str) -> None:
    r = client.get(f"{J}/{job}/logs", params={"attempt": attempt}, headers=VISION)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["query", "attempt"]
    assert "9" * 40 not in r.text
