"""Issue 25 item 6: /docs and /redoc work without internet: every script, stylesheet and
icon they reference is served by Shoal itself (FastAPI's defaults load them from a CDN)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

REF = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url:\s*'([^']+)'""")


def _refs(html: str) -> list[str]:
    return [a or b for a, b in REF.findall(html)]


def test_docs_pages_reference_no_external_host_and_their_assets_are_served(
    client: TestClient,
) -> None:
    for page, needed in (
        ("/docs", ("swagger-ui-bundle.js", "swagger-ui.css")),
        ("/redoc", ("redoc.standalone.js",)),
    ):
        r = client.get(page)
        assert r.status_code == 200, page
        html = r.text
        assert "http://" not in html and "https://" not in html, (page, _refs(html))
        refs = _refs(html)
        for name in needed:
            assert any(ref.endswith(name) for ref in refs), (page, name, refs)
        for ref in refs:
            assert ref.startswith("/"), (page, ref)
            asset = client.get(ref)
            assert asset.status_code == 200, (page, ref)
            assert len(asset.content) > 100, (page, ref)
    js = client.get("/docs/static/swagger-ui-bundle.js")
    assert js.headers["content-type"].startswith("text/javascript")
    assert b"SwaggerUIBundle" in js.content
    assert client.get("/docs/static/../app.py").status_code == 404
    assert client.get("/docs/static/nothing.js").status_code == 404
    # The schema the page loads is served too (Swagger UI 5 reads OpenAPI 3.1).
    assert client.get("/openapi.json").json()["openapi"].startswith("3.")
