"""Helpers shared by every test tier (importable as `support`: tests/ is on sys.path
through the root conftest): `wait.eventually`, `pg.schema_url`, `serve.serving`,
`builders`."""
