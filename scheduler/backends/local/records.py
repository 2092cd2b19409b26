"""The local backend's durable memory: which attempts it launched, with which processes.

Each attempt is one small file, `attempts/<job>.<attempt>.json`, replaced atomically
(write, fsync, rename) when that attempt changes, and an attempt is recorded *before*
its first process starts. After a crash the record may list fewer workers than were
started; `find_shims` recovers those from the process table (each shim carries its key
in its environment), so a restarted service knows every worker and never starts an
attempt again. (One file for all attempts, rewritten whole three times per launch, was
most of the scheduler loop's CPU under a burst of submissions: docs/benchmarks.md.) A
`state.json` of an older version is read once and split into these files.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from scheduler.backends.local import shimenv


@dataclass
class WorkerRecord:
    worker: int
    node: str
    gpus: list[int]
    fraction: float
    log: str
    exit_file: str
    pid: int | None = None
    start_ticks: int | None = None  # /proc start time, to tell a reused pid apart
    error: str = ""  # why it could not be started (the job's failure reason)
    told: bool = False  # SIGTERM sent to its shim (only once the shim is in the ledger)
    # An elastic attempt's worker has its own SHOAL_STOP_FILE ("": the attempt's), so a
    # shrink tells only the workers it removes (`resizing`).
    stop_file: str = ""
    stop_deadline: float | None = None  # removed by a shrink: SIGKILL after this
    stop_reason: str = ""
    killed: bool = False
    # How many times a shrink removed this index and a grow added it back: part of its
    # shim's key, so the ledger tells the new process from the old one.
    generation: int = 0


@dataclass
class AttemptRecord:
    job_id: str
    attempt: int
    queue: str
    port: int
    preempt_file: str
    workers: list[WorkerRecord] = field(default_factory=list)
    launched: bool = False  # every worker started (False: a crash interrupted launch)
    stop_deadline: float | None = None  # SIGKILL after this (time.time())
    killed: bool = False
    stop_file: str = ""  # SHOAL_STOP_FILE: the reason of the stop (base.StopReason)
    stop_reason: str = ""
    user: str = ""  # the OS user its workers run as ("": the service's own)
    adopted_from: str = ""  # the instance that launched it, when another (`elsewhere`)

    @property
    def key(self) -> str:
        return attempt_key(self.job_id, self.attempt)


def attempt_key(job_id: str, attempt: int) -> str:
    return f"{job_id}/{attempt}"


class Records:
    """All attempt records of one state directory, loaded once; `save` writes the ones
    that changed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.dir = root / "attempts"
        self.dir.mkdir(exist_ok=True)
        self.ledger = root / "launches.log"
        id_file = root / "instance"
        if not id_file.exists():
            id_file.write_text(uuid.uuid4().hex[:12])
        self.instance = id_file.read_text().strip()
        self.attempts: dict[str, AttemptRecord] = {}
        self._written: dict[str, str] = {}  # key -> the text its file holds
        legacy = root / "state.json"
        loaded: list[AttemptRecord] = []
        if legacy.exists():
            loaded += [decode(raw) for raw in json.loads(legacy.read_text()).get("attempts", [])]
        for f in self.dir.iterdir():
            if f.suffix == ".tmp":  # a write a crash interrupted: its rename never happened
                f.unlink(missing_ok=True)
            elif f.suffix == ".json":
                text = f.read_text()
                rec = decode(json.loads(text))
                self._written[rec.key] = text
                loaded.append(rec)
        # Sorted, so that a restarted service lists workers in the same order every time.
        for rec in sorted(loaded, key=lambda r: (r.job_id, r.attempt)):
            self.attempts[rec.key] = rec  # a file written after state.json wins
        if legacy.exists():
            self.save()
            legacy.unlink()

    def save(self, *changed: AttemptRecord) -> None:
        """Write the records of `changed`, or, without any, every record that differs from
        its file (and remove the files of records no longer in `attempts`)."""
        if changed:
            for rec in changed:
                self._write(rec)
            return
        for rec in self.attempts.values():
            self._write(rec)
        for key in [k for k in self._written if k not in self.attempts]:
            job_id, attempt = key.rsplit("/", 1)
            self._file(job_id, int(attempt)).unlink(missing_ok=True)
            del self._written[key]

    def _file(self, job_id: str, attempt: int) -> Path:
        return record_file(self.dir, job_id, attempt)

    def _write(self, rec: AttemptRecord) -> None:
        text = json.dumps(_encode(rec))
        key = rec.key
        if self._written.get(key) == text:
            return
        path = self._file(rec.job_id, rec.attempt)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        if key not in self._written:
            # A new file's name is durable only once its directory is.
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._written[key] = text

    def shim_key(self, job_id: str, attempt: int, worker: int, generation: int = 0) -> str:
        return shim_key(self.instance, job_id, attempt, worker, generation)

    def adopt_interrupted(self) -> None:
        """After a restart: adopt shims started by a launch a crash interrupted. The
        attempt stays unlaunched: its workers never started are not reported, and a
        repeated `launch` starts them (`backend`'s module doc)."""
        pending = [r for r in self.attempts.values() if not r.launched]
        if not pending:
            return
        found = find_shims(self.instance)
        for rec in pending:
            for w in rec.workers:
                pid = found.get(self.shim_key(rec.job_id, rec.attempt, w.worker, w.generation))
                if w.pid is None and pid is not None:
                    w.pid, w.start_ticks = pid, start_ticks(pid)
        self.save()

    def launches(self) -> dict[str, int]:
        """How many processes the ledger says were started per `instance:job:attempt:w`."""
        counts: dict[str, int] = {}
        if self.ledger.exists():
            for line in self.ledger.read_text().splitlines():
                key = line.split(" ", 1)[0]
                counts[key] = counts.get(key, 0) + 1
        return counts


def _encode(rec: AttemptRecord) -> dict[str, Any]:
    # The fields by hand, not `dataclasses.asdict` (a deep copy: ten times slower here).
    return {**vars(rec), "workers": [vars(w) for w in rec.workers]}


def shim_key(instance: str, job_id: str, attempt: int, worker: int, generation: int = 0) -> str:
    """The key a worker's shim carries (`instance:job:attempt:worker`, then `.generation`
    for a worker a grow added back after a shrink removed it)."""
    key = f"{instance}:{job_id}:{attempt}:{worker}"
    return f"{key}.{generation}" if generation else key


def record_file(directory: Path, job_id: str, attempt: int) -> Path:
    return directory / f"{quote(job_id, safe='')}.{attempt}.json"


def decode(raw: dict[str, Any]) -> AttemptRecord:
    workers = [WorkerRecord(**w) for w in raw.pop("workers")]
    return AttemptRecord(**raw, workers=workers)


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks, or None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def alive(rec: WorkerRecord) -> bool:
    if rec.pid is None:
        return False
    ticks = start_ticks(rec.pid)
    return ticks is not None and (rec.start_ticks is None or ticks == rec.start_ticks)


def find_shims(instance: str) -> dict[str, int]:
    """Live shims of this state directory by key. A shim is known by its command line
    (`-m scheduler.backends.local.shim`) and the service's user, and says its key in its
    environment (`shimenv`), which only that user and root can read; one started by
    an older version says it in its arguments (`--key`)."""
    found: dict[str, int] = {}
    me = os.geteuid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"scheduler.backends.local.shim" not in argv or entry.stat().st_uid != me:
                continue
            if b"--key" in argv:
                key = argv[argv.index(b"--key") + 1].decode()
            else:
                key = shimenv.key_in((entry / "environ").read_bytes())
        except (OSError, IndexError, UnicodeDecodeError):
            continue  # gone meanwhile, or not ours to read
        if key.startswith(instance + ":") and start_ticks(int(entry.name)) is not None:
            found[key] = int(entry.name)
    return found
