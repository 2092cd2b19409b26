"""`/docs` (Swagger UI) and `/redoc` with their assets served by this process, no CDN.

FastAPI's default pages load Swagger UI and ReDoc from cdn.jsdelivr.net, so offline (an
air-gapped cluster, a laptop on a train) `/docs` is a blank page. The `fastapi-offline`
package ships the distributions' files (Swagger UI 5, Apache-2.0; ReDoc 2, MIT); this
module serves those files under `/docs/static/` and points FastAPI's own page builders
at them. Nothing here is authenticated, as FastAPI's pages are not: the OpenAPI schema
describes the API, it holds no data.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI, HTTPException
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse, Response

STATIC_URL = "/docs/static"
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}


def asset(name: str) -> bytes:
    """One of the packaged files (KeyError for any other name)."""
    if name not in ASSETS:
        raise KeyError(name)
    return resources.files("fastapi_offline").joinpath("static", name).read_bytes()


def install(app: FastAPI) -> None:
    """Serve /docs, its OAuth2 redirect, /redoc and their assets (the app was built with
    `docs_url=None, redoc_url=None`)."""
    openapi_url = app.openapi_url or "/openapi.json"
    redirect_url = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=redirect_url,
            swagger_js_url=f"{STATIC_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{STATIC_URL}/swagger-ui.css",
            swagger_favicon_url=f"{STATIC_URL}/favicon.png",
            swagger_ui_parameters=app.swagger_ui_parameters,
        )

    @app.get(redirect_url, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{STATIC_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{STATIC_URL}/favicon.png",
            with_google_fonts=False,
        )

    @app.get(STATIC_URL + "/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        try:
            body = asset(name)
        except KeyError:
            raise HTTPException(404, "no such file") from None
        return Response(
            body, media_type=ASSETS[name], headers={"Cache-Control": "public, max-age=86400"}
        )
