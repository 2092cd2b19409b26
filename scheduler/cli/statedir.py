"""`shoal serve`'s state directory: its lock, its secrets, and who may read it.

Without a tokens file, `prepare_state` creates `admin-token` (random; the CLI reads it
from here), `worker-key` (signs per-job worker tokens), `tokens.yaml` for the API and
`url`. The directory holds those secrets, the SQLite database and every team's logs, so
it is the service's alone: `secure` makes it 0700 and takes the group and other bits
off everything in it, at every start, so a state directory of an older version (0644
files) is fixed too; `shoal serve` also sets umask 077, so what it creates later is
0600. Workers never get a path into it (docs/gpu.md, "Sharing one box between teams").
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import stat
from pathlib import Path

import yaml

log = logging.getLogger("shoal.serve")


def _token(path: Path) -> str:
    if not path.exists():
        # Created 0600: never readable by others, not even for a moment.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(fd, "w") as f:
            f.write(secrets.token_urlsafe(24) + "\n")
    return path.read_text().strip()


def prepare_state(state: Path, url: str | None) -> tuple[str, str, Path]:
    """Tokens and the token file for the API; returns (admin token, worker key,
    tokens.yaml). No token in the file is given to workers: each job's workers get one
    minted from the worker key, scoped to that job's progress. `url` (None: leave it, as
    `--role scheduler` does, whose port serves no API) is written for the CLI."""
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    admin, worker_key = _token(state / "admin-token"), _token(state / "worker-key")
    (state / "worker-token").unlink(missing_ok=True)  # the old all-queues member token
    tokens = state / "tokens.yaml"
    tokens.touch(mode=0o600)
    tokens.chmod(0o600)
    tokens.write_text(yaml.safe_dump({admin: {"user": "admin", "role": "admin", "queues": ["*"]}}))
    if url is not None:
        (state / "url").write_text(url + "\n")
    return admin, worker_key, tokens


_LOCKS: list[int] = []  # held for the life of the process


def claim_state(state: Path, url: str) -> str | None:
    """Lock `state` for this server; None when it was free, else who holds it (another
    `shoal serve` on the same state directory: its pid and URL)."""
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state / "serve.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        return holder
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} at {url}\n".encode(), 0)
    _LOCKS.append(fd)
    return None


def secure(state: Path) -> None:
    """`state` 0700, its directories 0700 and its files without group or other bits.
    Links are left alone (never followed); what cannot be changed (a volume's root owned
    by someone else) is logged, not fatal."""
    try:
        state.chmod(0o700)
        for root, dirs, files in os.walk(state):  # does not descend into linked directories
            for name in dirs + files:
                path = os.path.join(root, name)
                st = os.lstat(path)
                if stat.S_ISDIR(st.st_mode):
                    os.chmod(path, 0o700)
                elif stat.S_ISREG(st.st_mode) and st.st_mode & 0o077:
                    os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)
    except OSError as e:
        log.warning("cannot make the state directory %s private: %s", state, e)
