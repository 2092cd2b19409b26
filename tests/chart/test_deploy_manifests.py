"""deploy/shoal.yaml is the chart rendered with the plain-manifest values; this keeps it
in sync. Regenerate with SHOAL_UPDATE_MANIFESTS=1 .venv/bin/pytest tests/chart."""

from __future__ import annotations

import os

from .conftest import DEPLOY_ARGS, NAMESPACE, RELEASE, ROOT, template_text

DEPLOY = ROOT / "deploy" / "shoal.yaml"
HEADER = (
    "# Shoal as plain manifests: `helm template {release} helm/shoal --namespace {ns} "
    "{args}`.\n# Create the namespace and the auth Secret first (docs/install.md); "
    "do not edit, run\n# SHOAL_UPDATE_MANIFESTS=1 .venv/bin/pytest tests/chart to regenerate.\n"
)


def rendered(helm: str) -> str:
    header = HEADER.format(release=RELEASE, ns=NAMESPACE, args=" ".join(DEPLOY_ARGS))
    return header + template_text(helm, *DEPLOY_ARGS)


def test_deploy_manifests_match_the_chart(helm: str) -> None:
    fresh = rendered(helm)
    if os.environ.get("SHOAL_UPDATE_MANIFESTS") == "1":
        DEPLOY.write_text(fresh)
    assert DEPLOY.exists(), "deploy/shoal.yaml is missing; regenerate it (see module doc)"
    assert DEPLOY.read_text() == fresh, "deploy/shoal.yaml is stale; regenerate it"
