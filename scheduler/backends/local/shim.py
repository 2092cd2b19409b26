"""The supervisor the local backend starts for every worker: `python -m
scheduler.backends.local.shim -- ARGV...`, told its exit file, ledger, key and user by
its environment, never by its arguments (`shimenv`: any local user reads arguments). The
user's process inherits the shim's environment without them.

Why a shim: the service may be killed and restarted while workers run, and a restarted
service is no longer their parent, so it could not learn their exit codes. The shim
outlives the service, forwards SIGTERM/SIGINT to the user's process and writes the exit
code to its exit file (atomically) when it ends. It first appends one line to the launch
ledger, the record tests use to prove no worker ever started twice. The line is written
after the signal handlers are set, so the backend signals only shims listed there: a
SIGTERM any earlier would kill the shim itself, and the user's process would never hear it.

With a user U (the service is root: `users`) the user's process runs as U, with U's
groups only and umask 022 as a fresh login has, while the shim stays root to write the
exit file and the ledger in the state directory, which U cannot read. The process's
stdout and stderr are the log file the shim was given, so U writes its log without
being able to open it, or any other.
"""

from __future__ import annotations

import grp
import os
import pwd
import sys
import time
from typing import Any

from scheduler.backends.local.shimenv import EXIT_FILE_VAR, KEY_VAR, LEDGER_VAR, USER_VAR, VARS
from scheduler.worker.supervisor import Supervisor


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _as_user(name: str | None) -> dict[str, Any]:
    """Popen's arguments that run the process as `name` (KeyError: no such user)."""
    if name is None:
        return {}
    pw = pwd.getpwnam(name)
    groups = [g.gr_gid for g in grp.getgrall() if name in g.gr_mem and g.gr_gid != pw.pw_gid]
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": groups, "umask": 0o022}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    told = {v: os.environ.get(v, "") for v in VARS}
    if argv[:1] != ["--"] or not all(told[v] for v in (EXIT_FILE_VAR, LEDGER_VAR, KEY_VAR)):
        print(f"usage: shim -- ARGV... (with {', '.join(VARS[:3])} set)", file=sys.stderr)
        return 2
    command = argv[1:]
    exit_file, ledger, key = told[EXIT_FILE_VAR], told[LEDGER_VAR], told[KEY_VAR]
    user = told[USER_VAR] or None
    # Left out of the user's process only: the shim's own environment stays as it was
    # started, which is where `records.find_shims` reads the key.
    env = {k: v for k, v in os.environ.items() if k not in VARS}
    # Until the user's process exists, a signal is kept and forwarded once it does.
    supervisor = Supervisor()
    # One short O_APPEND write is atomic, so concurrent shims never interleave lines.
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, f"{key} {os.getpid()} {time.time():.3f}\n".encode())
    os.fsync(fd)
    os.close(fd)
    try:
        supervisor.start(command, env=env, **_as_user(user))
    except (OSError, KeyError) as exc:
        print(f"shoal: cannot start {command[:1]}: {exc}", file=sys.stderr, flush=True)
        _write_atomic(exit_file, "127\n")
        return 127
    code = supervisor.wait()
    _write_atomic(exit_file, f"{code}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
