"""What every role of `shoal serve` does before it serves: read the settings and the
policy, claim the state directory, make or find the tokens, say where it serves."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from scheduler.cli import settings as serve_settings
from scheduler.cli.roles import Role
from scheduler.cli.statedir import claim_state, prepare_state

log = logging.getLogger("shoal.serve")


def announce(url: str, state: Path, db_url: str, admin: str | None, part: Role) -> None:
    what = {Role.ALL: "serving", Role.API: "API serving", Role.SCHEDULER: "scheduler probes"}
    shown = without_password(db_url)
    print(f"Shoal {what[part]} on {url}  (state {state}, database {shown})", flush=True)
    if admin is not None:
        print(f"admin token: {admin}  (also in {state / 'admin-token'})", flush=True)


def without_password(url: str) -> str:
    """The database URL as it may be printed or logged: its password as `***`."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:  # not a URL open_database takes either; say nothing of it
        return "(a URL that cannot be parsed)"
    userinfo, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{host}"))


def password_on_command_line(argv: Sequence[str], db_url: str | None) -> str | None:
    """A warning when `--database-url` was typed with a password, None otherwise: every
    local user reads every process's arguments (ps, /proc/<pid>/cmdline), workers
    included, but not its environment, so SHOAL_DATABASE_URL keeps the password."""
    typed = any(a == "--database-url" or a.startswith("--database-url=") for a in argv)
    if not typed or db_url is None or without_password(db_url) == db_url:
        return None
    return (
        "--database-url shows its password to every local user of this host (ps, "
        "/proc/<pid>/cmdline), this server's workers included: set SHOAL_DATABASE_URL instead"
    )


def settings_and_policy(
    policy: str, min_runtime_s: float, interval_s: float
) -> tuple[serve_settings.ServeSettings, serve_settings.Policy]:
    """The chart's environment and the policy (file, then flags); bad ones stop here."""
    try:
        env = serve_settings.from_env()
        pol = serve_settings.load_policy(
            env.policy_file,
            policy=policy,
            min_runtime_s=min_runtime_s,
            interval_s=interval_s,
            worker_tolerations=env.worker_tolerations,
        )
    except serve_settings.SettingsError as e:
        raise SystemExit(str(e)) from None
    return env, pol


def claim(state: Path, url: str, backend_kind: serve_settings.BackendKind) -> bool:
    """Claim the state directory; whether this process owns it (no other `shoal serve`
    uses it). Two local backends on one directory are refused."""
    holder = claim_state(state, url)
    if holder is not None:
        what = f"another `shoal serve` ({holder}) is using the state directory {state}"
        if backend_kind is serve_settings.BackendKind.LOCAL:
            # Two local backends on one directory would both run and reap its workers.
            raise SystemExit(f"{what}; stop it first, or give this one another --state-dir")
        log.warning("%s; only one of them schedules at a time (the store's lease)", what)
    return holder is None


def tokens(
    env: serve_settings.ServeSettings, state: Path, url: str | None
) -> tuple[str | None, str | None, Path]:
    """(the admin token made now, the worker-token key, the tokens file)."""
    admin: str | None
    worker_key: str | None
    if env.tokens_file:  # tokens come from the operator (the chart's Secret): make none
        state.mkdir(parents=True, exist_ok=True)
        admin, worker_key, tokens = None, None, Path(env.tokens_file)
    else:
        admin, worker_key, tokens = prepare_state(state, url)
    return admin, os.environ.get("SHOAL_WORKER_KEY") or worker_key, tokens
