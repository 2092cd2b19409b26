"""Mounts the dashboard (`api.dashboard.routes`) at /ui, outside the /api/v1 prefix."""

from __future__ import annotations

from api.dashboard.routes import router

PREFIX = ""
__all__ = ["PREFIX", "router"]
