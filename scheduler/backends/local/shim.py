"""The supervisor the local backend starts for every worker: `python -m
scheduler.backends.local.shim --exit-file F --ledger L --key K [--user U] -- ARGV...`.

Why a shim: the service may be killed and restarted while workers run, and a restarted
service is no longer their parent, so it could not learn their exit codes. The shim
outlives the service, forwards SIGTERM/SIGINT to the user's process and writes the exit
code to `--exit-file` (atomically) when it ends. It first appends one line to the launch
ledger, the record tests use to prove no worker ever started twice. The line is written
after the signal handlers are set, so the backend signals only shims listed there: a
SIGTERM any earlier would kill the shim itself, and the user's process would never hear it.

With `--user U` (the service is root: `users`) the user's process runs as U, with U's
groups only and umask 022 as a fresh login has, while the shim stays root to write the
exit file and the ledger in the state directory, which U cannot read. The process's
stdout and stderr are the log file the shim was given, so U writes its log without
being able to open it, or any other.
"""

from __future__ import annotations

import argparse
import grp
import os
import pwd
import sys
import time
from typing import Any

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
    if "--" not in argv:
        print("usage: shim --exit-file F --ledger L --key K -- ARGV...", file=sys.stderr)
        return 2
    cut = argv.index("--")
    parser = argparse.ArgumentParser(prog="shoal-local-shim")
    parser.add_argument("--exit-file", required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--user", default=None)
    args = parser.parse_args(argv[:cut])
    command = argv[cut + 1 :]
    # Until the user's process exists, a signal is kept and forwarded once it does.
    supervisor = Supervisor()
    # One short O_APPEND write is atomic, so concurrent shims never interleave lines.
    fd = os.open(args.ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, f"{args.key} {os.getpid()} {time.time():.3f}\n".encode())
    os.fsync(fd)
    os.close(fd)
    try:
        supervisor.start(command, **_as_user(args.user))
    except (OSError, KeyError) as exc:
        print(f"shoal: cannot start {command[:1]}: {exc}", file=sys.stderr, flush=True)
        _write_atomic(args.exit_file, "127\n")
        return 127
    code = supervisor.wait()
    _write_atomic(args.exit_file, f"{code}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
