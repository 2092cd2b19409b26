"""The local backend's durable memory: which attempts it launched, with which processes.

`state.json` is rewritten atomically (write, fsync, rename) after every change, and an
attempt is recorded *before* its first process starts. After a crash the record may
list fewer workers than were started; `find_shims` recovers those from the process
table (each shim carries its key on its command line), so a restarted service knows
every worker and never starts an attempt again.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


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

    @property
    def key(self) -> str:
        return attempt_key(self.job_id, self.attempt)


def attempt_key(job_id: str, attempt: int) -> str:
    return f"{job_id}/{attempt}"


class Records:
    """All attempt records of one state directory, loaded once and saved on change."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.path = root / "state.json"
        self.ledger = root / "launches.log"
        id_file = root / "instance"
        if not id_file.exists():
            id_file.write_text(uuid.uuid4().hex[:12])
        self.instance = id_file.read_text().strip()
        self.attempts: dict[str, AttemptRecord] = {}
        if self.path.exists():
            for raw in json.loads(self.path.read_text()).get("attempts", []):
                workers = [WorkerRecord(**w) for w in raw.pop("workers")]
                rec = AttemptRecord(**raw, workers=workers)
                self.attempts[rec.key] = rec

    def save(self) -> None:
        data: dict[str, Any] = {"attempts": [asdict(a) for a in self.attempts.values()]}
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def shim_key(self, job_id: str, attempt: int, worker: int) -> str:
        return f"{self.instance}:{job_id}:{attempt}:{worker}"

    def launches(self) -> dict[str, int]:
        """How many processes the ledger says were started per `instance:job:attempt:w`."""
        counts: dict[str, int] = {}
        if self.ledger.exists():
            for line in self.ledger.read_text().splitlines():
                key = line.split(" ", 1)[0]
                counts[key] = counts.get(key, 0) + 1
        return counts


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
    """Live shims of this state directory by key, read from /proc/*/cmdline."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"scheduler.backends.local.shim" not in argv or b"--key" not in argv:
            continue
        key = argv[argv.index(b"--key") + 1].decode()
        if key.startswith(instance + ":") and start_ticks(int(entry.name)) is not None:
            found[key] = int(entry.name)
    return found
