"""The dashboard's pages under /ui: server-rendered Jinja2 templates, refreshed in place
by htmx polling (the poller's request, marked `X-Shoal-Fragment`, gets only the page's
live fragment; links and forms are htmx-boosted whole pages).

Sign-in takes an API token, checks it exactly as the API does (`api.deps.get_principal`)
and keeps it in an HttpOnly, SameSite=Strict cookie scoped to /ui; every page then reads
the store with that principal's visible queues, so a team sees what its token sees
through the API and nothing more (another team's job is "not found", another team's GPU
shares are grey and anonymous). Pages only read: nothing here changes the store.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.templating import Jinja2Templates

from api import deps, models, queuestats, redact, usage, views
from api.auth import Principal, Role
from api.dashboard import charts, csrf, history
from api.errors import ApiError
from api.services import Services, services_of
from scheduler.spec import Phase
from scheduler.store import jobs, queues
from scheduler.store.cluster import load_inventory
from scheduler.store.db import Database

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
COOKIE = "shoal_token"
POLL_S = 2
LOG_TAIL = 64 * 1024
STATIC = {
    "htmx.min.js": "text/javascript",
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
}
CSP = (
    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'"
)

router = APIRouter(prefix="/ui", include_in_schema=False)
templates = Jinja2Templates(directory=str(HERE / "templates"))


templates.env.globals.update(
    poll_s=POLL_S, pct=charts.pct, polyline=charts.polyline, csrf_token=csrf.csrf_token
)
templates.env.filters["clock"] = lambda t: time.strftime("%H:%M", time.localtime(t))


def _size(j: models.JobPublic) -> str:
    """A job's workers as the CLI shows them: its size now (a finished job's, the size it
    ended at), an elastic job's with its range: `3 (2-8)`."""
    s = j.spec
    return f"{j.workers} ({s.min_workers}-{s.max_workers})" if s.elastic else str(j.workers)


templates.env.filters["size"] = _size


def _services(request: Request) -> Services:
    return services_of(request.app)


def _database(request: Request) -> Database:
    return _services(request).database


def _colours(request: Request) -> Callable[[str | None], str]:
    """Each queue's colour, by creation order (`api.dashboard.charts`)."""
    with _database(request).session() as session:
        rows = queues.list_queues(session=session)
    return charts.colours([r.name for r in sorted(rows, key=lambda r: (r.created_at, r.name))])


def history_of(request: Request) -> history.History:
    return _services(request).history


def _principal(request: Request) -> Principal | None:
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    creds = HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)
    try:
        principal = deps.get_principal(_services(request), creds)
    except (HTTPException, ApiError):
        return None
    return None if principal.role in (Role.WORKER, Role.METRICS) else principal


def _to_login(request: Request) -> Response:
    if request.headers.get("HX-Request"):
        return Response(status_code=401, headers={"HX-Redirect": "/ui/login"})
    return RedirectResponse("/ui/login", status_code=303)


def _page(
    request: Request, name: str, principal: Principal | None, status: int = 200, **ctx: Any
) -> HTMLResponse:
    """The full page, or only its live fragment for htmx's polling."""
    # The poller of #live asks for its fragment; boosted navigation gets whole pages.
    partial = request.headers.get("X-Shoal-Fragment") == "1" and not request.headers.get(
        "HX-Boosted"
    )
    response = templates.TemplateResponse(
        request,
        name,
        {"principal": principal, "partial": partial, "colour": _colours(request), **ctx},
        status_code=status,
    )
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "no-store"
    csrf.attach(request, response)
    return response


def _not_found(request: Request, principal: Principal, what: str) -> HTMLResponse:
    return _page(request, "notfound.html", principal, status=404, what=what)


@router.get("/static/{name}")
def static(name: str) -> Response:
    if name not in STATIC:
        raise HTTPException(404, "no such file")
    return Response(
        (HERE / "static" / name).read_bytes(),
        media_type=STATIC[name],
        headers={"Cache-Control": "public, max-age=3600"},
    )


@router.get("", response_model=None)
@router.get("/", response_model=None)
def home(request: Request) -> Response:
    if _principal(request) is None:
        return _to_login(request)
    return RedirectResponse("/ui/cluster", status_code=303)


@router.get("/login", response_model=None)
def login_form(request: Request) -> Response:
    return _page(request, "login.html", None, error=None)


@router.post("/login", response_model=None)
async def login(request: Request) -> Response:
    form = urllib.parse.parse_qs((await request.body()).decode(errors="replace"))
    token = (form.get("token") or [""])[0].strip()
    error = None
    if not csrf.valid(request, form):
        return _page(request, "login.html", None, status=403, error=csrf.REFUSED)
    if not token:
        error = "token: paste an API token"
    else:
        creds = HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)
        try:
            principal = deps.get_principal(_services(request), creds)
        except ApiError as exc:
            # A token this server turns away on purpose (team tokens where workers share
            # its OS user: api.auth.refusal) says why; any other is unknown to it.
            why = exc.items[0].msg if exc.status == 403 and exc.items else "unknown or revoked"
            error = f"token: {why}"
        except HTTPException:
            error = "token: unknown or revoked"
        else:
            if principal.role in (Role.WORKER, Role.METRICS):
                error = f"token: a {principal.role} token cannot sign in to the dashboard"
    if error is not None:
        return _page(request, "login.html", None, status=401, error=error)
    response = RedirectResponse("/ui/cluster", status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/ui",
        max_age=12 * 3600,
    )
    return response


@router.post("/logout", response_model=None)
async def logout(request: Request) -> Response:
    form = urllib.parse.parse_qs((await request.body()).decode(errors="replace"))
    if not csrf.valid(request, form):
        return Response(csrf.REFUSED, status_code=403, media_type="text/plain")
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/ui")
    return response


def _excluded(request: Request) -> dict[str, str]:
    """Nodes the backend does not offer, with why (where `shoal serve` wired them in)."""
    excluded = _services(request).wiring.excluded_nodes
    return excluded() if excluded is not None else {}


@router.get("/cluster", response_model=None)
def cluster(request: Request) -> Response:
    principal = _principal(request)
    if principal is None:
        return _to_login(request)
    with _database(request).session() as session:
        u = usage.compute(session)
    nodes = views.nodes(u, principal)
    by_model = sorted(u.by_model().items())
    legend = sorted(
        {s.queue for n in nodes.data for g in n.gpus for s in g.shares if s.queue is not None}
    )
    return _page(
        request,
        "cluster.html",
        principal,
        nodes=nodes.data,
        by_model=by_model,
        excluded=sorted(_excluded(request).items()),
        legend=legend,
        history=history.cluster_chart(history_of(request).samples()),
    )


@router.get("/queues", response_model=None)
def queues_page(request: Request) -> Response:
    principal = _principal(request)
    if principal is None:
        return _to_login(request)
    config = _services(request).wiring.core_config
    with _database(request).session() as session:
        stats = queuestats.compute(queuestats.snapshot(session, config))
        capacity = float(sum(n.gpu_count for n in load_inventory(session=session)))
    shown = queuestats.visible(stats, principal.visible_queues)
    # To the cluster's size (or what a queue holds or is owed beyond it): a guarantee or
    # limit far above the cluster is drawn at the bar's end, not shrinking every bar.
    scale = charts.bar_scale(capacity, [v for s in shown for v in (s.fair_share, s.allocated)])
    names = [s.name for s in shown]
    chart = history.queue_chart(history_of(request).samples(), names, _colours(request))
    return _page(request, "queues.html", principal, queues=shown, scale=scale, history=chart)


@router.get("/jobs", response_model=None)
def jobs_page(request: Request, queue: str = "", phase: str = "") -> Response:
    principal = _principal(request)
    if principal is None:
        return _to_login(request)
    wanted = Phase(phase) if phase in {p.value for p in Phase} else None
    with _database(request).session() as session:
        page = jobs.list_jobs(
            session=session,
            queues=principal.visible_queues,
            queue=queue or None,
            phase=wanted,
            submitter=None,
            limit=200,
            cursor=None,
        )
        rows = redact.jobs(session, principal, views.jobs(page.items))
        config = _services(request).wiring.core_config
        stats = queuestats.compute(queuestats.snapshot(session, config))
    names = [s.name for s in queuestats.visible(stats, principal.visible_queues)]
    return _page(
        request,
        "jobs.html",
        principal,
        jobs=rows,
        queue=queue,
        phase=wanted.value if wanted else "",
        queue_names=names,
        phases=[p.value for p in Phase],
        more=page.next_cursor is not None,
    )
