"""Per-job worker tokens: what a worker gets in SHOAL_API_TOKEN.

A worker's token lets it do one thing: report progress of its own job
(`POST /api/v1/jobs/{id}/progress`). It is `w1.<job id>.<signature>`, the signature an
HMAC-SHA256 of the job id under a key only the service holds (`worker-key` in the state
directory, or SHOAL_WORKER_KEY), so the service mints one per job without storing it and
checks it without a lookup. One team's code can therefore never read, submit or cancel
another team's jobs with the token it finds in its environment; it cannot even cancel
its own job.
"""

from __future__ import annotations

import hashlib
import hmac

PREFIX = "w1."


def mint(key: str, job_id: str) -> str:
    """The worker token of `job_id` under `key`."""
    return f"{PREFIX}{job_id}.{_sign(key, job_id)}"


def verify(key: str, token: str) -> str | None:
    """The job id a worker token is good for, or None when it is not one of `key`'s."""
    if not key or not token.startswith(PREFIX):
        return None
    job_id, sep, sig = token[len(PREFIX) :].rpartition(".")
    if not sep or not job_id:
        return None
    return job_id if hmac.compare_digest(sig, _sign(key, job_id)) else None


def _sign(key: str, job_id: str) -> str:
    mac = hmac.new(key.encode(), f"shoal-worker:{job_id}".encode(), hashlib.sha256)
    return mac.hexdigest()
