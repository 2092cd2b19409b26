"""The chart's layout by database (docs/install.md, "API and scheduler apart"): SQLite runs
one pod of both (`--role all`, no flag); PostgreSQL runs the API's replicas behind the
Service and the scheduler's (one leading, one standing by) apart, each with probes, the
API without a Kubernetes token, the scheduler keeping the Deployment it always had."""

from __future__ import annotations

from typing import Any

from .conftest import Render, by_kind

POSTGRES = ("database.type=postgres", "database.postgres.url=postgresql+psycopg://s:p@db:5432/s")


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def _role(deployment: dict[str, Any]) -> str | None:
    args = _container(deployment)["args"]
    return args[args.index("--role") + 1] if "--role" in args else None


def test_sqlite_runs_one_pod_of_both(render: Render) -> None:
    docs = render()
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert _role(deployment) is None  # `--role all`, the default
    service = by_kind(docs, "Service", "shoal")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_postgres_runs_the_api_and_the_scheduler_apart(render: Render) -> None:
    docs = render(*POSTGRES, "api.workers=3")
    api, scheduler = by_kind(docs, "Deployment", "shoal-api"), by_kind(docs, "Deployment", "shoal")
    assert (_role(api), _role(scheduler)) == ("api", "scheduler")
    assert (api["spec"]["replicas"], scheduler["spec"]["replicas"]) == (2, 2)
    args = _container(api)["args"]
    assert args[args.index("--api-workers") + 1] == "3"
    # The Service sends requests to the API's pods only.
    selector = by_kind(docs, "Service", "shoal")["spec"]["selector"]
    assert selector.items() <= api["spec"]["template"]["metadata"]["labels"].items()
    assert not selector.items() <= scheduler["spec"]["template"]["metadata"]["labels"].items()
    # Each Deployment's selector picks its own pods, not the other's.
    for one, other in ((api, scheduler), (scheduler, api)):
        mine = one["spec"]["selector"]["matchLabels"].items()
        assert mine <= one["spec"]["template"]["metadata"]["labels"].items()
        assert not mine <= other["spec"]["template"]["metadata"]["labels"].items()
    for d in (api, scheduler):
        c = _container(d)
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_api_gets_no_kubernetes_token_and_workers_report_to_the_service(
    render: Render,
) -> None:
    docs = render(*POSTGRES)
    api, scheduler = by_kind(docs, "Deployment", "shoal-api"), by_kind(docs, "Deployment", "shoal")
    assert api["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert scheduler["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    env = {e["name"]: e.get("value") for e in _container(scheduler)["env"]}
    assert env["SHOAL_WORKER_API_URL"] == "http://shoal.shoal-system.svc:80"
    assert env["SHOAL_LEADER_ELECTION"] == "true"


def test_the_scheduler_keeps_the_deployment_it_had(render: Render) -> None:
    """A Deployment's selector cannot change: an upgrade from one pod of both keeps the
    scheduler's name and selector (and its Lease); the API's Deployment is new."""
    before = by_kind(render(*POSTGRES, "scheduler.replicas=1"), "Deployment", "shoal")
    sqlite = by_kind(render(), "Deployment", "shoal")
    assert before["spec"]["selector"] == sqlite["spec"]["selector"]


def test_the_scheduler_pods_are_scraped_too(render: Render) -> None:
    docs = render(*POSTGRES, "serviceMonitor.enabled=true")
    monitor = by_kind(docs, "PodMonitor", "shoal-scheduler")
    scheduler = by_kind(docs, "Deployment", "shoal")
    pods = scheduler["spec"]["template"]["metadata"]["labels"].items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pods
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["bearerTokenSecret"] == {"name": "shoal-auth", "key": "metrics-token"}
    service_monitor = by_kind(docs, "ServiceMonitor", "shoal")
    service = by_kind(docs, "Service", "shoal")
    assert (
        service_monitor["spec"]["selector"]["matchLabels"].items()
        <= service["metadata"]["labels"].items()
    )
    assert not [d for d in render("serviceMonitor.enabled=true") if d["kind"] == "PodMonitor"]
