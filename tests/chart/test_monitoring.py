"""The chart's monitoring: the Grafana dashboard ConfigMap and the ServiceMonitor's
scrape credential (a `metrics` role token in the auth Secret)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import generate_latest

from api.metrics import Metrics
from scheduler import model
from scheduler.store.db import open_database

from .conftest import CHART, Render, by_kind


def test_grafana_dashboard_configmap_is_off_by_default_and_labelled(render: Render) -> None:
    assert not [d for d in render() if d["metadata"]["name"].endswith("grafana-dashboard")]
    docs = render("grafanaDashboard.enabled=true", "grafanaDashboard.namespace=monitoring")
    (cm,) = [d for d in docs if d["metadata"]["name"] == "shoal-grafana-dashboard"]
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["shoal.json"])
    assert dashboard["uid"] == "shoal-scheduler" and len(dashboard["panels"]) >= 10


def test_service_monitor_scrapes_with_the_metrics_token(render: Render) -> None:
    docs = render("serviceMonitor.enabled=true", "serviceMonitor.scrapeToken=scrape-me-0123456789")
    endpoint = by_kind(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["bearerTokenSecret"] == {"name": "shoal-auth", "key": "metrics-token"}
    secret = by_kind(docs, "Secret", "shoal-auth")["stringData"]
    assert secret["metrics-token"] == "scrape-me-0123456789"
    tokens = yaml.safe_load(secret["tokens.yaml"])
    assert tokens["scrape-me-0123456789"] == {"user": "prometheus", "role": "metrics", "queues": []}
    generated = by_kind(render(), "Secret", "shoal-auth")["stringData"]["metrics-token"]
    assert len(generated) == 40


def test_every_series_the_dashboard_queries_exists(tmp_path: Path) -> None:
    """Each shoal_* name in the dashboard's queries is one the server exports."""
    db = open_database(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        metrics = Metrics(db)
        # One cycle's figures, so the histograms and counters have samples.
        report = type("Report", (), {})()
        report.seconds, report.steps, report.now = 0.01, {"schedule": 0.005}, 10.0
        job = model.JobRequest("j", "q", gpu=1, submitted_at=1.0)
        victim = model.RunningJob(model.JobRequest("v", "q", gpu=1), ())
        report.snapshot = model.Snapshot(nodes=(), queues=(), running=(victim,), pending=(job,))
        report.result = model.CycleResult(
            places=(model.Place("j", ()),),
            preempts=(model.Preempt("v", "reclaimed for job j", 30.0, "j"),),
            violations=(model.Violation("gang-incomplete", "x", "v"),),
        )
        metrics.observe_cycle(report)
        text = generate_latest(metrics.registry).decode()
    finally:
        db.close()
    exported = {re.sub(r"_(total)$", "", n) for n in re.findall(r"^# TYPE (shoal_\w+)", text, re.M)}
    queried = json.loads((CHART / "dashboards" / "shoal.json").read_text())
    names = {
        re.sub(r"_(bucket|sum|count|total)$", "", n)
        for p in queried["panels"]
        for t in p["targets"]
        for n in re.findall(r"\b(shoal_\w+)", t["expr"])
    }
    assert names and names <= exported, names - exported
    assert 'shoal_preempted_workloads_total{queue="q",reason="reclaim"} 1.0' in text
