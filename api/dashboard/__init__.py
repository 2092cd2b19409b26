"""The web dashboard served by `shoal serve` under /ui (see docs/dashboard.md)."""
