"""Every job shape through the CLI's read commands (issue 35): `shoal jobs`, `shoal job`,
`shoal logs` and `shoal explain` for a rigid job, a gang, fractions, an elastic job
(running, and finished at the size it grew to), a pending job with an estimate and a
failed one, piped and on an 80-column terminal, and as `-o wide|json|yaml`.

An elastic job's `workers` is `{min, max}`: `shoal logs` ended in a TypeError on it and
`shoal jobs` printed the dict; rows were 125-151 characters wide."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from conftest import ADMIN, Shoal, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient
from rich.console import Console

from api.services import Wiring
from scheduler.cli import output
from scheduler.model import WorkerPlacement
from scheduler.spec import Phase
from scheduler.store import estimates, resizes
from scheduler.store.rows import get_job
from scheduler.store.transitions import record_placement, set_phase

AN_HOUR_AGO = datetime.now(UTC) - timedelta(hours=1)
ELASTIC: dict[str, object] = {
    "framework": "pytorch",
    "workers": {"min": 2, "max": 4},
    "command": ["torchrun"],
}
# name -> (body, placements as (node, gpus, fraction) per worker; None: not placed)
SHAPES: dict[str, tuple[dict[str, object], list[tuple[str, tuple[int, ...], float]] | None]] = {
    "rigid": ({"gpu": 2}, [("h1", (0, 1), 1.0)]),
    "gang": ({"workers": 3, "gpu": 1}, [("h1", (2,), 1.0), ("h1", (3,), 1.0), ("h2", (0,), 1.0)]),
    "fractional": ({"workers": 2, "gpu": 0.5}, [("h2", (1,), 0.5), ("h2", (2,), 0.5)]),
    "elastic": (ELASTIC, [("h2", (3,), 1.0), ("h2", (4,), 1.0), ("h2", (5,), 1.0)]),
    "elastic-done": (ELASTIC, [("a1", (0,), 1.0), ("a1", (1,), 1.0)]),
    "pending": ({"workers": 2, "gpu": 8}, None),
    "failed": ({"gpu": 1}, [("a1", (2,), 1.0)]),
}


class Logs:
    """Each job's worker 0 wrote two lines."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def log_files(self, job_id: str) -> list[tuple[int, int, Path]]:
        path = self.root / f"{job_id}-0.log"
        if not path.exists():
            path.write_text("worker 0 starts\nworker 0 step 1 loss 0.5\n")
        return [(1, 0, path)]


@pytest.fixture
def wiring(tmp_path: Path) -> Wiring:
    return Wiring(log_source=Logs(tmp_path))


def _place(app: FastAPI, job_id: str, where: list[tuple[str, tuple[int, ...], float]]) -> int:
    placements = [WorkerPlacement(i, n, g, f) for i, (n, g, f) in enumerate(where)]
    with app.state.database.session() as s:
        row = get_job(session=s, job_id=job_id)
        v = record_placement(
            session=s, job_id=job_id, expected_version=row.version, placements=placements,
            attempt=1, now=AN_HOUR_AGO,
        )  # fmt: skip
        return set_phase(
            session=s, job_id=job_id, expected_version=v, phase=Phase.RUNNING, now=AN_HOUR_AGO
        )


@pytest.fixture
def shapes(app: FastAPI, client: TestClient) -> Iterator[dict[str, str]]:
    """name -> id of a job of each shape, in the state its name says."""
    ids = {}
    for name, (body, where) in SHAPES.items():
        r = client.post("/api/v1/jobs", json=job_body(name=name, **body), headers=ADMIN)
        assert r.status_code == 201, r.text
        ids[name] = job_id = r.json()["id"]
        if where is not None:
            version = _place(app, job_id, where)
        with app.state.database.session() as s:
            if name == "elastic-done":  # grew to 3, then ended
                three = [*get_job(session=s, job_id=job_id).placements]
                grown = [WorkerPlacement(**p) for p in three] + [
                    WorkerPlacement(2, "a1", (3,), 1.0)
                ]
                version = resizes.record_resize(
                    session=s, job_id=job_id, expected_version=version, placements=grown,
                    reason="idle GPUs",
                )  # fmt: skip
                set_phase(session=s, job_id=job_id, expected_version=version, phase=Phase.SUCCEEDED)
            elif name == "failed":
                set_phase(
                    session=s, job_id=job_id, expected_version=version, phase=Phase.FAILED,
                    reason="WorkerFailed", message="worker 0 exited with code 3 " + "x" * 90,
                )  # fmt: skip
            elif name == "pending":
                soon = datetime.now(UTC) + timedelta(hours=2)
                basis = "gang ends at its maxRuntime"
                guess = estimates.StartEstimate(job_id, soon, 1, basis, "", datetime.now(UTC))
                estimates.replace_all(session=s, estimates=[guess])
    yield ids


@pytest.fixture(params=["piped", "terminal"])
def console(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The CLI's console piped (80 columns) or on an 80-column terminal."""
    if request.param == "terminal":
        tty = Console(highlight=False, force_terminal=True, width=80, color_system=None)
        monkeypatch.setattr(output, "out", tty)
    return str(request.param)


def test_jobs_lists_every_shape_in_80_columns(
    shapes: dict[str, str], shoal: Shoal, console: str
) -> None:
    result = shoal("jobs")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 + len(SHAPES), result.output
    assert max(len(line) for line in lines) <= 80, result.output
    row = {line.split()[0]: line.split() for line in lines[1:]}
    assert row["rigid"][3:5] == ["1", "1x2"]
    assert row["gang"][3:5] == ["3", "3x1"]
    assert row["fractional"][3:5] == ["2", "2x0.5"]
    assert row["elastic"][3:6] == ["3", "(2-4)", "3x1"]  # the size now, not {'min': ...}
    assert row["elastic-done"][2:6] == ["Succeeded", "3", "(2-4)", "3x1"]  # ended at 3
    assert row["pending"][2] == "Pending" and "#1 ~in" in " ".join(row["pending"])
    assert row["failed"][2] == "Failed" and "WorkerFailed" in " ".join(row["failed"])


def test_jobs_wide_json_and_yaml(shapes: dict[str, str], shoal: Shoal) -> None:
    wide = shoal("jobs", "-o", "wide")
    assert wide.exit_code == 0, wide.output
    for name, job_id in shapes.items():
        assert job_id in wide.output and name in wide.output
    assert "x" * 90 in wide.output  # the reason whole
    for fmt, load in (("json", json.loads), ("yaml", yaml.safe_load)):
        result = shoal("jobs", "-o", fmt)
        assert result.exit_code == 0, result.output
        items = {j["name"]: j for j in load(result.output)["items"]}
        assert {n: j["id"] for n, j in items.items()} == shapes
        assert items["elastic"]["workers"] == 3
        assert items["elastic-done"]["workers"] == 3
        assert items["elastic"]["spec"]["workers"] == {"min": 2, "max": 4}
    bad = shoal("jobs", "-o", "xml")
    assert bad.exit_code == 2 and "xml" in bad.output


@pytest.mark.parametrize("name", list(SHAPES))
def test_job_logs_and_explain_for_every_shape(
    shapes: dict[str, str], shoal: Shoal, console: str, name: str
) -> None:
    job_id = shapes[name]
    shown = shoal("job", name)
    assert shown.exit_code == 0, shown.output
    assert job_id in shown.output
    if name.startswith("elastic"):
        assert "workers 3 (2-4)  gpu 3x1" in shown.output
    as_json = shoal("job", name, "-o", "json")
    assert as_json.exit_code == 0 and json.loads(as_json.output)["id"] == job_id
    logs = shoal("logs", name)
    assert logs.exit_code == 0, logs.output
    if SHAPES[name][1] is not None:
        assert "w0 worker 0 starts" in logs.output
    explained = shoal("explain", name)
    assert explained.exit_code == 0, explained.output
    assert job_id in explained.output
    data = shoal("explain", name, "-o", "yaml")
    assert data.exit_code == 0 and "decision" in yaml.safe_load(data.output)


def test_queues_nodes_and_tokens_as_data(shapes: dict[str, str], shoal: Shoal) -> None:
    queues = json.loads(shoal("queues", "-o", "json").output)["items"]
    assert {q["name"] for q in queues} == {"vision", "nlp"}
    vision = next(q for q in queues if q["name"] == "vision")
    assert vision["usage"]["running"] == 4  # rigid, gang, fractional, elastic
    wide = shoal("queues", "-o", "wide")
    assert "PRIORITY" in wide.output and "PARENT" in wide.output
    nodes = yaml.safe_load(shoal("nodes", "-o", "yaml").output)["items"]
    assert sorted(n["name"] for n in nodes) == ["a1", "h1", "h2"]
    assert shoal("tokens", "create", "dan", "-q", "vision").exit_code == 0
    tokens = json.loads(shoal("tokens", "list", "-o", "json").output)["items"]
    assert [t["user"] for t in tokens] == ["dan"] and "token" not in tokens[0]
