"""What the local backend tells a worker's shim (`shim`), as variables of the shim's
environment, never its arguments: every local user reads every process's command line
(/proc/<pid>/cmdline, `ps`), and these name the state directory and the job; a process's
environment only its own user (the service's) and root read. A module of its own, so
that the backend's package never imports `shim`, which runs as `python -m`."""

from __future__ import annotations

EXIT_FILE_VAR = "SHOAL_SHIM_EXIT_FILE"
LEDGER_VAR = "SHOAL_SHIM_LEDGER"
KEY_VAR = "SHOAL_SHIM_KEY"  # also how `records.find_shims` knows a shim after a crash
USER_VAR = "SHOAL_SHIM_USER"
VARS = (EXIT_FILE_VAR, LEDGER_VAR, KEY_VAR, USER_VAR)


def environment(*, exit_file: str, ledger: str, key: str, user: str | None) -> dict[str, str]:
    """The variables that tell a shim its exit file, ledger, key and user."""
    told = {EXIT_FILE_VAR: exit_file, LEDGER_VAR: ledger, KEY_VAR: key}
    return told | ({USER_VAR: user} if user is not None else {})


def key_in(environ: bytes) -> str:
    """The shim's key in a /proc/<pid>/environ ("" when it has none)."""
    prefix = KEY_VAR.encode() + b"="
    for item in environ.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode()
    return ""
