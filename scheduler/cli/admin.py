"""`shoal queues [create|update|delete]` and `shoal tokens [create|list|revoke]`: what an
admin changes through the REST API (the listings are for everyone who may read them).

Quotas are given as the API takes them, a total and per GPU model: `--guaranteed 8
--guaranteed H100=4` is `{total: 8, H100: 4}`. On update the values given replace those
keys of the queue's quota and keep the others; `MODEL=none` drops a model's entry, and
`--limit none` the limit altogether.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer
from rich.markup import escape

from scheduler.cli import cluster, output
from scheduler.cli.client import Api, die, err
from scheduler.cli.output import Format, Output

Url = Annotated[str | None, typer.Option("--url", help="API URL (default: SHOAL_URL)")]
Token = Annotated[str | None, typer.Option("--token", help="bearer token (default: SHOAL_TOKEN)")]
QUOTA_HELP = "GPUs: a total (8) and/or per model (H100=4); repeat it"
Quota = Annotated[list[str] | None, typer.Option(help=QUOTA_HELP, show_default=False)]
NONE = ("none", "-")

queues_app = typer.Typer(
    help="List queues (a tree, parents summing their children), or change them (admin).",
    invoke_without_command=True,
)
tokens_app = typer.Typer(help="API tokens: create (shown once), list, revoke (admin).")


def parse_quota(values: list[str], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """`["8", "H100=4"]` -> `{"total": 8, "H100": 4}`, over `base`; `MODEL=none` (or
    `total=none`) drops that key."""
    quota = dict(base or {})
    for value in values:
        key, _, amount = value.rpartition("=")
        key = key.strip() or "total"
        if amount.strip().lower() in NONE:
            quota.pop(key, None)
            continue
        try:
            number = float(amount)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number < 0:
            die(f"{value!r}: a quota is a number of GPUs >= 0, or MODEL=NUMBER (H100=4)")
        quota[key] = number
    return {k: v for k, v in quota.items() if v is not None}


def _say(verb: str, q: dict[str, Any]) -> None:
    limit = cluster.quota(q.get("limit"))
    output.out.print(
        f"queue {q['name']} {verb} (guaranteed {cluster.quota(q['guaranteed'])}, limit {limit}, "
        f"weight {q['weight']:g}, priority {q['priority']}, parent {q.get('parent') or '-'})"
    )
    for w in q.get("warnings") or []:
        output.out.print(f"[yellow]warning:[/yellow] {w}")


@queues_app.callback()
def queues(
    ctx: typer.Context, fmt: Output = Format.TABLE, url: Url = None, token: Token = None
) -> None:
    """Queues with guarantees, limits and what they hold now."""
    if ctx.invoked_subcommand is None:
        cluster.queues_table(Api(url, token), fmt)


@queues_app.command("create")
def create_queue(
    name: str,
    guaranteed: Quota = None,
    limit: Quota = None,
    weight: float = 1.0,
    priority: int = 0,
    parent: str | None = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Create a queue (admin): shoal queues create vision --guaranteed 8 --guaranteed H100=4"""
    body: dict[str, Any] = {
        "name": name,
        "guaranteed": parse_quota(guaranteed or ["0"]),
        "weight": weight,
        "priority": priority,
        "parent": parent,
    }
    if limit and parse_quota(limit):
        body["limit"] = parse_quota(limit)
    _say("created", Api(url, token).post("/queues", body))


@queues_app.command("update")
def update_queue(
    name: str,
    guaranteed: Quota = None,
    limit: Annotated[
        list[str] | None,
        typer.Option(help=QUOTA_HELP + "; none: no limit", show_default=False),
    ] = None,
    weight: float | None = None,
    priority: int | None = None,
    parent: Annotated[str | None, typer.Option(help="its parent queue; none: top level")] = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Change a queue (admin); what is not given stays as it is."""
    api = Api(url, token)
    q = api.request("GET", f"/queues/{name}")
    body: dict[str, Any] = {"version": q["version"]}  # refused if it changed meanwhile
    if guaranteed:
        body["guaranteed"] = parse_quota(guaranteed, q["guaranteed"])
    if limit:
        whole = [v for v in limit if v.strip().lower() in NONE]
        body["limit"] = None if whole else parse_quota(limit, q.get("limit")) or None
    if weight is not None:
        body["weight"] = weight
    if priority is not None:
        body["priority"] = priority
    if parent is not None:
        body["parent"] = None if parent.lower() in NONE else parent
    if len(body) == 1:
        die("nothing to change: give --guaranteed, --limit, --weight, --priority or --parent")
    _say("updated", api.request("PATCH", f"/queues/{name}", json=body))


@queues_app.command("delete")
def delete_queue(name: str, url: Url = None, token: Token = None) -> None:
    """Delete a queue (admin)."""
    Api(url, token).request("DELETE", f"/queues/{name}")
    output.out.print(f"queue {name} deleted")


@tokens_app.command("create")
def create_token(
    name: Annotated[
        str | None, typer.Argument(help="who the token is for (or --user)", show_default=False)
    ] = None,
    user: Annotated[str | None, typer.Option(help="who the token is for")] = None,
    role: Annotated[str, typer.Option(help="admin, member, viewer or metrics")] = "member",
    queue: Annotated[
        list[str] | None, typer.Option("--queue", "-q", help="a queue it may use ('*': all)")
    ] = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Make a token; it is printed this once (the server keeps only its digest).

    shoal tokens create alice -q vision;  shoal tokens create prometheus --role metrics
    """
    if name and user and name != user:
        die(f"two users given: {name!r} and --user {user!r}")
    who = name or user
    if not who:
        die("whom is the token for? shoal tokens create NAME (or --user NAME)")
    t = Api(url, token).post("/tokens", {"user": who, "role": role, "queues": queue or []})
    output.out.print(f"token {t['id']} for {t['user']} ({t['role']}, queues {t['queues']}):")
    print(t["token"], flush=True)  # plain, for `$(shoal tokens create ...)`
    output.out.print("[yellow]store it now: it is not shown again[/yellow]")
    if t.get("refused"):  # made all the same: it works once the admin fixes the cause
        why = escape(t["refused"])
        err.print(f"[yellow]warning:[/yellow] this server refuses it (403): {why}", highlight=False)


@tokens_app.command("list")
def list_tokens(fmt: Output = Format.TABLE, url: Url = None, token: Token = None) -> None:
    """Tokens made with `shoal tokens create` (never their secrets)."""
    found = Api(url, token).get("/tokens")["data"]
    if output.items(fmt, found):
        return
    rows = [
        [
            row["id"],
            row["user"],
            row["role"],
            row["createdAt"][:19],
            (row.get("revokedAt") or "-")[:19],
            ",".join(row["queues"]) or "-",
        ]
        for row in found
    ]
    output.table(
        ("ID", "USER", "ROLE", "CREATED", "REVOKED", "QUEUES"),
        rows,
        plain="QUEUES",
        fold=fmt is Format.WIDE,
    )


@tokens_app.command("revoke")
def revoke_token(token_id: str, url: Url = None, token: Token = None) -> None:
    """Revoke a token at once."""
    row = Api(url, token).request("DELETE", f"/tokens/{token_id}")
    output.out.print(f"token {row['id']} of {row['user']} revoked")
