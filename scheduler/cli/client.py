"""The CLI's HTTP client: where the API is, which token, and errors as exit codes.

URL: --url, else SHOAL_URL, else the `url` file `shoal serve` writes in its state
directory (SHOAL_STATE_DIR, default var/shoal), else http://127.0.0.1:8080. Token:
--token, else SHOAL_TOKEN, else the state directory's `admin-token`. Exit codes: 0 ok,
1 the API refused (4xx/5xx, its message printed), 2 the API could not be reached.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import parse_qsl, urlsplit

import httpx
import typer
from rich.console import Console

DEFAULT_URL = "http://127.0.0.1:8080"
EXIT_REFUSED = 1
EXIT_UNREACHABLE = 2

err = Console(stderr=True)


def state_dir() -> Path:
    return Path(os.environ.get("SHOAL_STATE_DIR", "var/shoal"))


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def resolve(url: str | None, token: str | None) -> tuple[str, str | None]:
    url = url or os.environ.get("SHOAL_URL") or _read(state_dir() / "url") or DEFAULT_URL
    token = token or os.environ.get("SHOAL_TOKEN") or _read(state_dir() / "admin-token")
    return url.rstrip("/"), token


def die(message: str, code: int = EXIT_REFUSED) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


def describe(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return f"HTTP {resp.status_code}: {resp.text[:300]}"
    items = body.get("detail") if isinstance(body, dict) else None
    if isinstance(items, list):
        lines = []
        for item in items:
            loc = ".".join(str(x) for x in item.get("loc", []) if x not in ("body",))
            lines.append(f"{loc}: {item.get('msg')}" if loc else str(item.get("msg")))
        return f"HTTP {resp.status_code}: " + "; ".join(lines)
    return f"HTTP {resp.status_code}: {items or body}"


class Api:
    """A thin wrapper: JSON in and out, errors turned into messages and exit codes."""

    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        # Where the token came from, for the hint on a 401.
        self.token_file = (
            state_dir() / "admin-token" if not token and not os.environ.get("SHOAL_TOKEN") else None
        )
        self.url, token = resolve(url, token)
        if token is None:
            self.token_file = None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=10.0)

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The one way to the API: a query string in `path` is merged into `params` (httpx
        drops it when `params` is also given), and a server that cannot be reached is one
        message and exit code 2 for every command, never a traceback."""
        split = urlsplit(path)
        if split.query:
            params = dict(parse_qsl(split.query, keep_blank_values=True))
            params.update(kwargs.pop("params", None) or {})
            kwargs["params"] = params
            path = split.path
        try:
            return self.http.request(method, "/api/v1" + path, **kwargs)
        except httpx.TransportError as exc:
            die(
                f"cannot reach Shoal at {self.url} ({exc}); is `shoal serve` running?",
                EXIT_UNREACHABLE,
            )

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        resp = self.send(method, path, **kwargs)
        if resp.status_code == 401 and self.token_file is not None:
            die(
                f"{describe(resp)}\nhint: the token came from {self.token_file}, which the "
                f"server at {self.url} does not know: it is stale (a server started on "
                "another state directory, or the directory was recreated). Point "
                "SHOAL_STATE_DIR at the server's state directory, or pass --token / "
                "SHOAL_TOKEN."
            )
        if resp.status_code >= 400:
            die(describe(resp))
        return None if resp.status_code == 204 or not resp.content else resp.json()

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.request("POST", path, json=body, **kwargs)

    def find_job(self, name_or_id: str, queue: str | None = None) -> dict[str, Any]:
        """A job by id, else by name: the live job of that name (names are unique among a
        queue's live jobs), else the only finished one. Several matches are an error
        listing them, never a silent pick."""
        resp = self.send("GET", f"/jobs/{name_or_id}") if len(name_or_id) <= 32 else None
        if resp is not None and resp.status_code == 200:
            job: dict[str, Any] = resp.json()
            return job
        found: list[dict[str, Any]] = []
        cursor = None
        for _ in range(20):
            page = self.get("/jobs", limit=500, cursor=cursor, queue=queue)
            found += [dict(j) for j in page["data"] if j["name"] == name_or_id]
            cursor = page.get("nextCursor")
            if not cursor:
                break
        if not found:
            die(f"no job named {name_or_id!r}")
        live = [j for j in found if j["phase"] not in ("Succeeded", "Failed", "Cancelled")]
        pick = live if live else found
        if len(pick) == 1:
            return pick[0]
        listed = ", ".join(f"{j['id']} ({j['queue']}, {j['phase']})" for j in pick[:10])
        die(f"{len(pick)} jobs are named {name_or_id!r}: {listed}; give the id instead")
