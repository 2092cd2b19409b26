"""The API server: calls with retries and rate limits (`api`, the only seam over the
official client), its answers as exceptions (`apierrors`), list-and-watch caches
(`reflector`), Events (`events`), leader election (`leader`) and idempotent writes of a
job's objects (`objects`)."""
