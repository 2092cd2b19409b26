"""The extra environment the loop gives a job's workers (SHOAL_API_URL, SHOAL_API_TOKEN).

`WorkerEnv` is either one mapping for every job or a function of the job id, so that each
job's workers get a token scoped to that job alone (`scheduler.workertoken`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from scheduler import workertoken

WorkerEnv = Mapping[str, str] | Callable[[str], Mapping[str, str]]


def env_for(env: WorkerEnv, job_id: str) -> dict[str, str]:
    return dict(env(job_id) if callable(env) else env)


@dataclass(frozen=True)
class ScopedWorkerEnv:
    """SHOAL_API_URL for every job and SHOAL_API_TOKEN minted for the job itself."""

    url: str
    key: str

    def __call__(self, job_id: str) -> Mapping[str, str]:
        return {"SHOAL_API_URL": self.url, "SHOAL_API_TOKEN": workertoken.mint(self.key, job_id)}
