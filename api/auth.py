"""Bearer tokens and roles.

Tokens come from a YAML file or the SHOAL_API_TOKENS variable, read once at start:

    s3cret-token:            # or "sha256:<hex>" to keep only the digest on disk
      user: alice
      role: member           # admin | member | viewer | metrics
      queues: [vision]       # member/viewer: the queues they may see; ["*"] for all

Only sha256 digests are kept in memory and compared with `hmac.compare_digest`. An admin
may do everything; a member may read, submit and cancel in its queues; a viewer may read
its queues; a metrics token may only read `/metrics` (all of it: a scrape credential
for Prometheus); a worker token (`scheduler.workertoken`, minted per job by the scheduler loop,
never in this file) may only report progress of its one job. Jobs and queues outside a
caller's queues are reported as not found, so a member of one team cannot learn of
another team's work.

A server whose workers could read its state (the local backend, workers run as the
service's own OS user: `scheduler.backends.local.users`) sets `team_tokens_refused` on
the app, and `refusal` turns member and viewer tokens away with that reason; admin,
metrics and worker tokens still work. `create_app` alone refuses nothing.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

ALL = "*"


class Role(StrEnum):
    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"
    WORKER = "worker"  # a job's own workers: progress of that job only
    METRICS = "metrics"  # a Prometheus scrape credential: every queue's /metrics, nothing else


@dataclass(frozen=True, slots=True)
class Principal:
    user: str
    role: Role
    queues: frozenset[str]
    job: str | None = None  # Role.WORKER: the one job it may report progress for

    @property
    def visible_queues(self) -> frozenset[str] | None:
        """The queues this caller may see; None means all of them."""
        if self.role in (Role.WORKER, Role.METRICS):
            return frozenset()
        if self.role is Role.ADMIN or ALL in self.queues:
            return None
        return self.queues

    def sees(self, queue: str) -> bool:
        visible = self.visible_queues
        return visible is None or queue in visible

    def may_submit(self, queue: str) -> bool:
        return self.role is Role.ADMIN or (self.role is Role.MEMBER and self.sees(queue))


TEAM_ROLES = frozenset({Role.MEMBER, Role.VIEWER})


def refusal(principal: Principal, team_tokens_refused: str | None) -> str | None:
    """Why this server turns `principal` away (a 403), or None."""
    if team_tokens_refused and principal.role in TEAM_ROLES:
        return team_tokens_refused
    return None


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenTable:
    """sha256(token) -> Principal."""

    def __init__(self, entries: Mapping[str, Principal]) -> None:
        self._entries = dict(entries)

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, token: str) -> Principal | None:
        wanted = digest(token)
        found = None
        # Compare against every entry so the time taken does not depend on which matched.
        for known, principal in self._entries.items():
            if hmac.compare_digest(known, wanted):
                found = principal
        return found

    @classmethod
    def parse(cls, data: Any) -> TokenTable:
        if data is None:
            return cls({})
        if not isinstance(data, Mapping):
            raise ValueError("the token file must map each token to {user, role, queues}")
        entries = {}
        for token, info in data.items():
            if not isinstance(info, Mapping) or "user" not in info or "role" not in info:
                raise ValueError("every token needs a user and a role")
            queues: Collection[str] = info.get("queues") or []
            key = str(token)
            hashed = key.removeprefix("sha256:") if key.startswith("sha256:") else digest(key)
            role = Role(info["role"])
            if role is Role.WORKER:
                raise ValueError("worker tokens are minted per job, not listed in a file")
            entries[hashed] = Principal(str(info["user"]), role, frozenset(queues))
        return cls(entries)

    @classmethod
    def load(cls, *, path: str | None, inline: str | None) -> TokenTable:
        table: dict[str, Principal] = {}
        for text in (Path(path).read_text() if path else None, inline):
            if text:
                table.update(cls.parse(yaml.safe_load(text))._entries)
        return cls(table)
