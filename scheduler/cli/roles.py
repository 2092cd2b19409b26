"""What `shoal serve --role` runs, and the combinations it refuses before anything starts.

`all` (the default): the API and the scheduler loop under one command (with the local
backend in two processes, `scheduler.cli.apiproc`; with the kubernetes one in one). `api`:
the API alone, on the store, with no backend and no loop. `scheduler`: the backend and
the loop, with only probes on its port (`scheduler.cli.probes`). The two halves meet in
the database, which also carries the API's wakes to the loop (`scheduler.store.wakeup`).
"""

from __future__ import annotations

from enum import StrEnum

from scheduler.cli.settings import BackendKind


class Role(StrEnum):
    ALL = "all"
    API = "api"
    SCHEDULER = "scheduler"


def parse(role: str) -> Role:
    try:
        return Role(role.strip().lower())
    except ValueError:
        names = ", ".join(r.value for r in Role)
        raise SystemExit(f"--role {role!r}: expected one of {names} (SHOAL_ROLE)") from None


def check(role: Role, *, backend_kind: BackendKind, database_url: str, api_workers: int) -> None:
    """Stop with why when the combination cannot work."""
    if role is not Role.ALL and backend_kind is BackendKind.LOCAL:
        raise SystemExit(
            f"--role {role} needs --backend kubernetes: the local backend's workers are "
            "processes of the scheduler's host and state directory, and the API reads their "
            "logs from there, so with --backend local run both halves under one command "
            "(--role all, the default)"
        )
    if api_workers < 1:
        raise SystemExit(f"--api-workers {api_workers}: at least 1 (SHOAL_API_WORKERS)")
    if api_workers > 1 and role is not Role.API:
        raise SystemExit(
            f"--api-workers {api_workers} is for --role api: --role {role} runs one API "
            "process beside the scheduler loop, which runs once"
        )
    if api_workers > 1 and database_url.startswith("sqlite"):
        raise SystemExit(
            f"--api-workers {api_workers} needs PostgreSQL (--database-url / "
            "SHOAL_DATABASE_URL): SQLite takes one writer at a time, so more API "
            "processes on it only queue behind each other's writes"
        )
