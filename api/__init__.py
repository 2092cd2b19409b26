"""Shoal REST API (FastAPI): a front door onto the store and the shared validation."""
