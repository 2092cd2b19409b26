"""The dashboard's CSRF token (a double-submit cookie): every page carries the token of its
browser in its forms (`csrf_token(request)` in the templates, a hidden `csrf` field), the
same token rides in an HttpOnly, SameSite=Strict cookie scoped to /ui, and a POST whose
field does not match its cookie is refused. The session cookie is SameSite=Strict already;
this guards the sign-in form too, which has no session yet (another site could otherwise
sign a browser in with its own token)."""

from __future__ import annotations

import hmac
import secrets

from fastapi import Request, Response

COOKIE = "shoal_csrf"
FIELD = "csrf"
REFUSED = (
    "this form expired or came from another site (no matching CSRF token): reload the page "
    "and try again"
)


def csrf_token(request: Request) -> str:
    """This browser's token: its cookie's, or a new one that `attach` then sets."""
    found = request.cookies.get(COOKIE, "")
    if len(found) == 43 and found.replace("-", "").replace("_", "").isalnum():
        return found
    new: str | None = getattr(request.state, "csrf_new", None)
    if new is None:
        new = request.state.csrf_new = secrets.token_urlsafe(32)
    return new


def attach(request: Request, response: Response) -> None:
    """Set the cookie of a token made for this response's page."""
    new: str | None = getattr(request.state, "csrf_new", None)
    if new is not None:
        response.set_cookie(
            COOKIE,
            new,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/ui",
        )


def valid(request: Request, form: dict[str, list[str]]) -> bool:
    """Whether a POST's `csrf` field matches its cookie."""
    cookie = request.cookies.get(COOKIE, "")
    sent = (form.get(FIELD) or [""])[0]
    return bool(cookie) and hmac.compare_digest(cookie.encode(), sent.encode())
