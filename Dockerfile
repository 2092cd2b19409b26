# syntax=docker/dockerfile:1
# Shoal's image: `shoal serve` (API + scheduler), `shoal reserve` (GPU reservation pods)
# and the worker launcher (`python -m scheduler.worker`). Build: docker build -t shoal .
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
# Kept equal to pyproject.toml's version (tests/chart/test_dockerfile.py checks).
ARG SHOAL_VERSION=0.1.0

# --- build: a wheel of Shoal, and wheels of its dependencies ---
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY scheduler/ scheduler/
COPY api/ api/
RUN pip wheel --wheel-dir /wheels .

# --- runtime: the wheels installed, nothing else (no compiler, no source tree) ---
FROM ${PYTHON_IMAGE}
ARG SHOAL_VERSION
LABEL org.opencontainers.image.title="shoal" \
      org.opencontainers.image.description="GPU-aware job scheduler for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SHOAL_STATE_DIR=/var/lib/shoal
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links=/wheels "shoal==${SHOAL_VERSION}" \
    && rm -rf /wheels \
    && groupadd --gid 10001 shoal \
    && useradd --uid 10001 --gid shoal --no-create-home --home-dir /var/lib/shoal shoal \
    && mkdir -p /var/lib/shoal \
    && chown shoal:shoal /var/lib/shoal
USER 10001:10001
WORKDIR /var/lib/shoal
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4).status != 200)"]
ENTRYPOINT ["shoal"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
