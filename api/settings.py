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
    # Load shedding (api.overload): past these a request gets 503 + Retry-After at once.
    max_in_flight: int = 64  # requests inside the app at once (0: no shedding)
    max_queued: int = 512  # requests waiting for a slot (bounds memory; max_wait_s bounds time)
    max_wait_s: float = 0.5  # the longest one waits before it is shed
    retry_after_s: int = 1
    # Open connections past this get 503 + Retry-After from the HTTP protocol, before the
    # app (scheduler.cli.connguard); 0: no bound.
    max_connections: int = 1024
    # How stale the feasibility checks' queues and nodes may be (api.feasibility_cache).
    admission_ttl_s: float = 1.0
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
            max_in_flight=int(os.environ.get("SHOAL_API_MAX_IN_FLIGHT", cls.max_in_flight)),
            max_queued=int(os.environ.get("SHOAL_API_MAX_QUEUED", cls.max_queued)),
            max_wait_s=float(os.environ.get("SHOAL_API_MAX_WAIT", cls.max_wait_s)),
            retry_after_s=int(os.environ.get("SHOAL_API_RETRY_AFTER", cls.retry_after_s)),
            max_connections=int(os.environ.get("SHOAL_API_MAX_CONNECTIONS", cls.max_connections)),
            admission_ttl_s=float(os.environ.get("SHOAL_API_ADMISSION_TTL", cls.admission_ttl_s)),
            worker_key=os.environ.get("SHOAL_WORKER_KEY") or None,
        )
