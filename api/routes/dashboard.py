"""Mounts the dashboard (`api.dashboard.routes`, `.jobpage`, `.whatif`) at /ui, outside
the /api/v1 prefix."""

from __future__ import annotations

from fastapi import APIRouter

from api.dashboard import jobpage, routes, whatif

router = APIRouter()
router.include_router(routes.router)
router.include_router(jobpage.router)
router.include_router(whatif.router)

PREFIX = ""
__all__ = ["PREFIX", "router"]
