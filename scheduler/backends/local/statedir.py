"""What the state directory keeps per job besides its records: `<state>/jobs/<job>/
<attempt>/`, with each worker's log and exit file (`worker-<i>.log`, `worker-<i>.exit`).
Only the service reads these; a worker writes its log through the descriptor its shim
was given."""

from __future__ import annotations

from pathlib import Path


def kept_jobs(state_dir: Path) -> set[str]:
    """Ids of the jobs with files in `state_dir`."""
    root = state_dir / "jobs"
    return {d.name for d in root.iterdir() if d.is_dir()} if root.is_dir() else set()


def log_files(state_dir: Path, job_id: str) -> list[tuple[int, int, Path]]:
    """(attempt, worker, path) of every worker log of a job, oldest attempt first."""
    root = state_dir / "jobs" / job_id
    out = []
    if root.is_dir():
        for d in root.iterdir():
            if d.name.isdigit():
                for f in d.glob("worker-*.log"):
                    out.append((int(d.name), int(f.stem.split("-")[1]), f))
    return sorted(out)
