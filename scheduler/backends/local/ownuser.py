"""The worker user `shoal serve` gives itself: run as root with no `workerUser`, its
workers run as `shoal-worker`, a system user with no home and no login shell, created
with `useradd` where it is absent, so team tokens work out of the box and no worker can
read the state directory.

That user must be able to run what a job's `python` is: this process's interpreter with
Shoal's code, in the working directory workers keep. A virtualenv whose interpreter lies
under /root (0700) is closed to it, and its jobs would all fail to start; so it is tried
at start, as that user. Where the user cannot be made (no useradd) or cannot run that
Python, the workers stay the service's own user, as before, and team tokens are refused
with why and what to do (`users.NoOwnUser`). Another interpreter is never swapped in
behind the operator's back: a job's `python` stays the service's (docs/gpu.md, "Sharing
one box between teams").
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
import stat
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from scheduler.backends.local.users import NoOwnUser, RunAs, WorkerUsers

log = logging.getLogger("shoal.local")

NAME = "shoal-worker"
# What `python -m scheduler.worker` (the examples' launcher) needs: the interpreter,
# Shoal's code, and the working directory, where jobs' relative paths point.
PROBE = "import os, scheduler.worker.launcher; os.listdir('.')"
PROBE_S = 60.0  # a cold interpreter on a loaded box
NOLOGIN = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")


def useradd_command(name: str, useradd: str = "useradd") -> list[str]:
    shell = next((s for s in NOLOGIN if os.path.exists(s)), NOLOGIN[-1])
    return [
        *(useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"),
        *("--shell", shell, "--comment", "Shoal workers", name),
    ]


def own_worker_user(name: str = NAME, *, useradd: str = "useradd") -> RunAs | NoOwnUser:
    """`name`, created where absent, if it can run a job's `python`; else why not."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        failed = _create(name, useradd)
        if failed is not None:
            return failed
    try:
        user = RunAs.lookup(name, where="its worker user")
    except ValueError as e:  # e.g. a `shoal-worker` of uid 0
        return NoOwnUser(str(e), f"remove that user {name}")
    why = cannot_run_python(user)
    if why is not None:
        fix = (
            f"install Shoal where {name} can run it (a virtualenv outside a private home "
            "such as /root, made from a Python outside one too)"
        )
        return NoOwnUser(why, fix)
    return user


def _create(name: str, useradd: str) -> NoOwnUser | None:
    cmd = useradd_command(name, useradd)
    try:
        done = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
        )
    except OSError as e:
        err = e.strerror or str(e)
    except subprocess.TimeoutExpired:
        err = "no answer in 60s"
    else:
        if done.returncode == 0:
            log.info("created the OS user %s for workers: %s", name, " ".join(cmd))
            return None
        err = done.stderr.strip() or f"exit code {done.returncode}"
    try:
        pwd.getpwnam(name)  # another server made it meanwhile
        return None
    except KeyError:
        pass
    return NoOwnUser(
        f"it could not create the OS user {name} ({useradd}: {err})",
        f"create it (useradd --system {name})",
    )


def cannot_run_python(user: RunAs) -> str | None:
    """Why `user` could not run a job's `python` here (None: it can), found by trying."""
    exe = sys.executable
    groups = [g.gr_gid for g in grp.getgrall() if user.name in g.gr_mem and g.gr_gid != user.gid]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/", "LANG": "C.UTF-8"}
    try:
        done = subprocess.run(
            [exe, "-c", PROBE],
            user=user.uid,
            group=user.gid,
            extra_groups=groups,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROBE_S,
        )
    except OSError as e:
        err = e.strerror or str(e)
    except subprocess.TimeoutExpired:
        err = f"no answer in {PROBE_S:g}s"
    else:
        if done.returncode == 0:
            return None
        lines = done.stderr.strip().splitlines()
        err = lines[-1] if lines else f"exit code {done.returncode}"
    real = os.path.realpath(exe)
    where = exe if real == exe else f"{exe}, that is {real}"
    closed = closed_directory((exe, real), user.uid, {user.gid, *groups})
    return (
        f"{user.name} cannot run its Python ({where}) with Shoal's code in {os.getcwd()}: "
        f"{err}" + (f" ({closed})" if closed else "")
    )


def closed_directory(paths: Iterable[str], uid: int, gids: set[int]) -> str | None:
    """The first directory on `paths` a user (`uid`, `gids`) may not enter, in words."""
    for path in paths:
        for d in reversed(Path(path).parents):
            try:
                st = os.stat(d)
            except OSError:
                continue
            bit = 0o100 if st.st_uid == uid else 0o010 if st.st_gid in gids else 0o001
            if not st.st_mode & bit:
                return f"{d} is {stat.S_IMODE(st.st_mode):04o}: closed to it"
    return None


def warn_of_configured(users: WorkerUsers) -> None:
    """Log each configured worker user that could not run a job's `python`: the admin
    chose it, so nothing is refused, but such jobs would fail to start."""
    if not users.can_switch:
        return
    default = None if users.own else users.default  # its own user was tried already
    chosen = {u.name: u for u in (default, *users.queues.values()) if u is not None}
    for user in chosen.values():
        why = cannot_run_python(user)
        if why is not None:
            log.warning("jobs whose command is `python` will not start: %s", why)
