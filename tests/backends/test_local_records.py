"""The local backend's records: one file per attempt, written only when it changes, read
back after a restart, and an older version's `state.json` split into such files."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from scheduler.backends.local.records import AttemptRecord, Records, WorkerRecord


def _attempt(job: str, attempt: int = 1) -> AttemptRecord:
    w = WorkerRecord(worker=0, node="n", gpus=[0], fraction=0.5, log="l", exit_file="e")
    return AttemptRecord(job, attempt, "q", 4000, "p", workers=[w])


def test_each_attempt_is_its_own_file_and_survives_a_restart(tmp_path: Path) -> None:
    r = Records(tmp_path)
    a, b = _attempt("a/1"), _attempt("b", 2)  # a "/" in an id stays inside the directory
    r.attempts[a.key], r.attempts[b.key] = a, b
    r.save(a)
    r.save()
    assert sorted(p.name for p in r.dir.iterdir()) == ["a%2F1.1.json", "b.2.json"]
    a.workers[0].pid, a.launched = 123, True
    before = (r.dir / "b.2.json").stat().st_mtime_ns
    r.save()
    assert (r.dir / "b.2.json").stat().st_mtime_ns == before  # unchanged: not rewritten
    again = Records(tmp_path)
    assert again.attempts == {a.key: a, b.key: b}


def test_a_forgotten_attempt_loses_its_file(tmp_path: Path) -> None:
    r = Records(tmp_path)
    a = _attempt("a")
    r.attempts[a.key] = a
    r.save(a)
    del r.attempts[a.key]
    r.save()
    assert not list(r.dir.iterdir()) and not Records(tmp_path).attempts


def test_an_interrupted_write_is_dropped(tmp_path: Path) -> None:
    r = Records(tmp_path)
    a = _attempt("a")
    r.attempts[a.key] = a
    r.save(a)
    (r.dir / "a.1.tmp").write_text("{partial")  # a crash between write and rename
    again = Records(tmp_path)
    assert again.attempts == {a.key: a} and not (r.dir / "a.1.tmp").exists()


def test_an_older_state_json_is_split_into_files(tmp_path: Path) -> None:
    a, b = _attempt("a"), _attempt("b")
    b.launched = True
    (tmp_path / "state.json").write_text(json.dumps({"attempts": [asdict(a), asdict(b)]}))
    r = Records(tmp_path)
    assert r.attempts == {a.key: a, b.key: b}
    assert not (tmp_path / "state.json").exists()
    assert Records(tmp_path).attempts == {a.key: a, b.key: b}
