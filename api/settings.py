"""API settings: where the database is, where the tokens come from, request limits."""

from __future__ import annotations

import os
from dataclasses import dataclass

from scheduler.store.db import Database

DEFAULT_DATABASE_URL = "sqlite:///var/shoal.db"


@dataclass(frozen=True)
class Settings:
    """`create_app(settings)` reads only these; `from_env` maps SHOAL_* variables on."""

    database_url: str = DEFAULT_DATABASE_URL
    tokens_file: str | None = None  # YAML: token -> {user, role, queues}
    tokens_yaml: str | None = None  # the same YAML inline (SHOAL_API_TOKENS)
    max_body_bytes: int = 1024 * 1024
    # Signs per-job worker tokens (scheduler.workertoken); None: workers get no token.
    worker_key: str | None = None
    # An already opened store (`shoal serve` shares one with the scheduler loop).
    database: Database | None = None

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            database_url=os.environ.get("SHOAL_DATABASE_URL", DEFAULT_DATABASE_URL),
            tokens_file=os.environ.get("SHOAL_API_TOKENS_FILE"),
            tokens_yaml=os.environ.get("SHOAL_API_TOKENS"),
            max_body_bytes=int(os.environ.get("SHOAL_API_MAX_BODY_BYTES", 1024 * 1024)),
            worker_key=os.environ.get("SHOAL_WORKER_KEY") or None,
        )
