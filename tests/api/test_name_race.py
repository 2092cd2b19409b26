"""Issue 35: `POST /jobs` answered 500 (IntegrityError on uq_jobs_live_name) when the job
holding the name ended between the INSERT's refusal and the re-read that looks for it.
The interleaving is forced, on SQLite and PostgreSQL: the re-read (`submission._clash`,
which runs once the refused INSERT is rolled back) first ends the holder through a
session of its own, and an INSERT after a re-read may first let another job take the
name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import VISION, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient

from scheduler.spec import JobSpec
from scheduler.store import submission
from scheduler.store.jobs import cancel_job
from scheduler.store.submission import submit_job

J = "/api/v1/jobs"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_app(request: pytest.FixtureRequest) -> Iterator[FastAPI]:
    yield request.getfixturevalue("app" if request.param == "sqlite" else "pg_app")


class Race:
    """The first `ends` re-reads each first cancel the job holding the name; the first
    `retakes` INSERTs after a re-read are each preceded by another submission of the
    name, whose job then holds it (its id in `taken`)."""

    def __init__(
        self, app: FastAPI, monkeypatch: pytest.MonkeyPatch, *, ends: int = 1, retakes: int = 0
    ) -> None:
        self.reads = 0
        self.taken: list[str] = []
        clash, insert = submission._clash, submission._insert

        def reread(*args: Any, **kwargs: Any) -> Any:
            self.reads += 1
            if self.reads <= ends:
                with app.state.database.session() as s:
                    holder = submission.live_job_named(session=s, queue="vision", name="race")
                    assert holder is not None
                    cancel_job(session=s, job_id=holder.id, by="race")
            return clash(*args, **kwargs)

        def insert_again(*args: Any, **kwargs: Any) -> Any:
            if self.reads > len(self.taken) and len(self.taken) < retakes:
                self.taken.append("")  # before the nested submission's own INSERT
                with app.state.database.session() as s:
                    spec = JobSpec.model_validate(job_body(name="race"))
                    self.taken[-1] = submit_job(session=s, spec=spec, submitter="x")[0].id
            return insert(*args, **kwargs)

        monkeypatch.setattr(submission, "_clash", reread)
        monkeypatch.setattr(submission, "_insert", insert_again)


def _holder(client: TestClient) -> str:
    got = client.post(J, json=job_body(name="race"), headers=VISION)
    assert got.status_code == 201, got.text
    return str(got.json()["id"])


def test_a_name_freed_between_the_refusal_and_the_reread_is_taken_by_the_retry(
    any_app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TestClient(any_app, raise_server_exceptions=False) as client:
        holder = _holder(client)
        race = Race(any_app, monkeypatch)
        got = client.post(J, json=job_body(name="race"), headers=VISION)
        assert got.status_code == 201, got.text  # was 500
        assert race.reads == 1  # the INSERT was refused: the race, not a plain submission
        assert got.json()["id"] != holder
        assert client.get(f"{J}/{holder}", headers=VISION).json()["phase"] == "Cancelled"


def test_a_name_taken_again_before_the_retry_is_409_naming_its_holder(
    any_app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TestClient(any_app, raise_server_exceptions=False) as client:
        _holder(client)
        race = Race(any_app, monkeypatch, retakes=1)
        got = client.post(J, json=job_body(name="race"), headers=VISION)
        assert got.status_code == 409, got.text  # was 500
        assert race.taken and race.taken[0] in got.text


def test_a_name_taken_and_freed_again_before_every_reread_is_409_never_500(
    any_app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every retry loses the same race (each new holder ends before its re-read)."""
    with TestClient(any_app, raise_server_exceptions=False) as client:
        _holder(client)
        race = Race(any_app, monkeypatch, ends=10, retakes=10)
        got = client.post(J, json=job_body(name="race"), headers=VISION)
        assert got.status_code == 409, got.text  # was 500
        assert "try again" in got.text
        assert 1 < race.reads < 10  # a few retries, then the answer
