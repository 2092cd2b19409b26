"""Route modules, found by name: every module here that defines `router` is mounted.

Adding an endpoint family is adding a file (e.g. `logs.py` with
`router = APIRouter(prefix="/jobs", tags=["jobs"])`). A module's `PREFIX` (default
"/api/v1") is where it mounts; health checks use "".
"""

from __future__ import annotations

import importlib
import pkgutil

from fastapi import APIRouter

API_PREFIX = "/api/v1"


def discover() -> list[tuple[str, APIRouter]]:
    """(prefix, router) for each route module, in name order."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        router = getattr(module, "router", None)
        if isinstance(router, APIRouter):
            found.append((str(getattr(module, "PREFIX", API_PREFIX)), router))
    return found
