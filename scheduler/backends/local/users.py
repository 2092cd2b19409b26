"""Which OS user runs each worker of the local backend, and whether that keeps teams apart.

A lab's shared GPU box runs one `shoal serve` for several teams. A worker running as the
service's own OS user could read the state directory (the admin token, the worker-token
key, the database, every team's logs), so on such a box the workers run as users of
their own: `workerUser` (the cluster file's key, or `--worker-user` / SHOAL_WORKER_USER)
for every queue, `queueUsers: {queue: user}` to give a team a user of its own. Switching
users needs root; the shim (itself root, so it can still write the exit file and the
ledger) starts the worker as that user.

Run as root with no `workerUser`, `shoal serve` gives the workers a user of its own,
`shoal-worker`, created where absent (`ownuser`), unless the operator keeps them as its
own (`--shared-user-ok`). Where the workers would run as the service's user anyway (it
is not root, or that user could not be made or cannot run the service's Python),
`shared_reason()` says so, and `shoal serve` refuses team tokens with that message
unless the operator accepts it (`--shared-user-ok`): docs/gpu.md, "Sharing one box
between teams".
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DOC = 'docs/gpu.md, "Sharing one box between teams"'


@dataclass(frozen=True)
class RunAs:
    """An OS user workers run as: resolved once at start, so a typo stops the service."""

    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def lookup(cls, name: str, *, where: str) -> RunAs:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise ValueError(f"{where}: no OS user {name!r} on this host") from None
        if pw.pw_uid == 0:
            raise ValueError(f"{where}: {name!r} is root; workers as root are kept from nothing")
        return cls(name, pw.pw_uid, pw.pw_gid, pw.pw_dir)


@dataclass(frozen=True)
class NoOwnUser:
    """Why a root service with no `workerUser` gave its workers no user of its own
    (`ownuser`), and what an admin can do about it."""

    why: str
    fix: str


@dataclass(frozen=True)
class WorkerUsers:
    """The configured worker users, and whether this process can switch to them."""

    default: RunAs | None = None
    queues: Mapping[str, RunAs] = field(default_factory=dict)
    can_switch: bool = False  # this process is root
    own: bool = False  # `default` is the service's own worker user (`ownuser`)
    no_own: NoOwnUser | None = None

    def for_queue(self, queue: str) -> RunAs | None:
        """Who runs a worker of `queue`; None: the service's own user."""
        if not self.can_switch:
            return None
        return self.queues.get(queue, self.default)

    def shared_reason(self) -> str | None:
        """Why workers could read the service's state, or None when none can."""
        if self.can_switch and self.default is not None:
            return None
        me, why = _current_user(), ""
        if not self.can_switch:
            fix = f"run it as root (it runs as {me}, so it cannot switch users)"
        elif self.no_own is not None:
            why = f" It gives them no user of its own: {self.no_own.why}."
            fix = f"{self.no_own.fix}, or set workerUser"
        else:
            fix = "set workerUser"
        return (
            f"team tokens are refused on this server: its workers run as its own OS user "
            f"({me}) and could read its state directory (the admin token, the database, "
            f"every team's logs).{why} An admin must {fix} ({DOC}), or start it with "
            "--shared-user-ok when all of its users are one trusted team"
        )


def _current_user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def from_cluster_file(path: str | Path | None) -> tuple[str | None, dict[str, str]]:
    """(workerUser, queueUsers) as the cluster file gives them (None, {} without them)."""
    if path is None:
        return None, {}
    data: Any = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict):
        return None, {}
    default = data.get("workerUser")
    queues = data.get("queueUsers") or {}
    if default is not None and not isinstance(default, str):
        raise ValueError(f"{path}: workerUser must be a user name")
    if not isinstance(queues, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in queues.items()
    ):
        raise ValueError(f"{path}: queueUsers must map queue names to user names")
    return default, dict(queues)


def resolve(
    cluster_file: str | Path | None,
    worker_user: str | None = None,
    *,
    is_root: bool | None = None,
    own: Callable[[], RunAs | NoOwnUser] | None = None,
) -> WorkerUsers:
    """The worker users of `shoal serve`: `worker_user` (the flag) over the file's
    `workerUser`, and the file's `queueUsers`; with neither given, as root, the user
    `own` gives (`ownuser.own_worker_user`). Raises ValueError naming a bad entry."""
    default, queues = from_cluster_file(cluster_file)
    where = "--worker-user" if worker_user else f"workerUser in {cluster_file}"
    default = worker_user or default
    can_switch = os.geteuid() == 0 if is_root is None else is_root
    run_as = RunAs.lookup(default, where=where) if default else None
    by_queue = {
        q: RunAs.lookup(u, where=f"queueUsers.{q} in {cluster_file}") for q, u in queues.items()
    }
    mine, no_own = False, None
    if run_as is None and can_switch and own is not None:  # after every check of the file
        got = own()
        run_as, mine, no_own = (got, True, None) if isinstance(got, RunAs) else (None, False, got)
    return WorkerUsers(run_as, by_queue, can_switch=can_switch, own=mine, no_own=no_own)
