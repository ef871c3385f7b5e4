"""The deployment files (docs/operations.md, "Scale-out"): the compose file scales web and
worker behind a proxy that streams, every service shares the metrics directory, and the
Kubernetes manifests probe /healthz and /readyz and keep one beat and one group runner.
(`make compose-config` validates the compose file with Docker Compose itself.)"""

from __future__ import annotations

from pathlib import Path

import yaml
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def manifests() -> dict[str, dict]:
    docs = yaml.safe_load_all((ROOT / "deploy" / "k8s" / "agentserver.yaml").read_text())
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


def test_the_migrations_run_once_before_any_of_the_web_processes_starts():
    services = compose()["services"]
    assert services["migrate"]["command"] == "python manage.py migrate --noinput"
    assert services["migrate"]["restart"] == "no"
    assert services["web"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert "migrate" not in services["web"]["command"]


def test_web_publishes_no_host_port_so_it_scales_and_the_proxy_publishes_one():
    services = compose()["services"]
    assert "ports" not in services["web"] and services["web"]["expose"] == ["8000"]
    assert services["proxy"]["ports"] == ["${PORT:-8000}:8000"]
    assert "./deploy/nginx.conf:/etc/nginx/nginx.conf:ro" in services["proxy"]["volumes"]
    assert services["proxy"]["depends_on"]["web"]["condition"] == "service_healthy"
    assert "/readyz" in " ".join(services["web"]["healthcheck"]["test"])


def test_the_proxy_re_resolves_the_web_processes_and_passes_streams_through_unbuffered():
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    assert "resolver 127.0.0.11" in conf and "proxy_pass $web;" in conf  # a variable: looked up again
    assert "proxy_buffering off;" in conf and "proxy_read_timeout 1h;" in conf
    assert "proxy_http_version 1.1;" in conf


def test_every_app_service_counts_into_the_shared_metrics_volume():
    document = compose()
    for name in ("web", "worker", "beat", "groups"):
        service = document["services"][name]
        assert service["environment"]["PROMETHEUS_MULTIPROC_DIR"] == "/metrics-data", name
        assert "metrics:/metrics-data" in service["volumes"], name
    assert "metrics" in document["volumes"]


def test_kubernetes_web_pods_are_probed_on_healthz_and_readyz():
    web = manifests()["Deployment/agentserver-web"]["spec"]["template"]["spec"]["containers"][0]
    assert web["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8000}
    assert web["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8000}


def test_kubernetes_keeps_one_beat_and_one_group_runner_even_during_a_rollout():
    found = manifests()
    for name in ("agentserver-beat", "agentserver-groups"):
        spec = found[f"Deployment/{name}"]["spec"]
        assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}, name


def test_kubernetes_gives_a_worker_the_time_to_finish_the_runs_it_began():
    worker = manifests()["Deployment/agentserver-worker"]["spec"]["template"]["spec"]
    assert worker["terminationGracePeriodSeconds"] >= settings.AGENT_TIME_LIMIT


def test_prometheus_scrapes_every_web_worker_and_grpc_pod_on_the_port_that_serves_its_metrics():
    found = manifests()
    config = found["ConfigMap/agentserver"]["data"]
    for role, port in (("web", 8000), ("worker", 9808), ("grpc", 9809)):
        template = found[f"Deployment/agentserver-{role}"]["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true", role
        assert (annotations["prometheus.io/port"], annotations["prometheus.io/path"]) == (str(port), "/metrics"), role
        container = template["spec"]["containers"][0]
        assert port in [p["containerPort"] for p in container["ports"]], role
        # Its processes count into the pod's own emptyDir, which its /metrics sums.
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == config["PROMETHEUS_MULTIPROC_DIR"])
        volume = next(v for v in template["spec"]["volumes"] if v["name"] == mount["name"])
        assert volume["emptyDir"] == {}, role
    worker = found["Deployment/agentserver-worker"]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "WORKER_METRICS_PORT", "value": "9808"} in worker["env"]
    grpc = found["Deployment/agentserver-grpc"]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "GRPC_METRICS_PORT", "value": "9809"} in grpc["env"]
    assert {"name": "metrics", "containerPort": 9809} in grpc["ports"]


# --- metrics: never open to anyone (docs/operations.md, "Who may read the metrics") -------------


def every_value(node) -> list:
    if isinstance(node, dict):
        return [v for value in node.values() for v in every_value(value)] + list(node)
    if isinstance(node, list):
        return [v for value in node for v in every_value(value)]
    return [node]


def test_compose_serves_metrics_only_inside_its_network_and_only_to_a_bearer_of_the_token():
    document = compose()
    for name in ("web", "worker", "beat", "groups"):
        environment = document["services"][name]["environment"]
        assert environment["METRICS_ENABLED"] == "${METRICS_ENABLED:-1}", name
        # From the operator's environment, never a value of the file's own: unset, web refuses.
        assert environment["METRICS_TOKEN"] == "${METRICS_TOKEN:-}", name
        assert "METRICS_PUBLIC" not in environment and environment["DJANGO_DEBUG"] == "${DJANGO_DEBUG:-0}", name
    assert "ports" not in document["services"]["web"]  # only the proxy publishes a port ...
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    assert "location = /metrics {\n            return 404;\n        }" in conf  # ... and it refuses /metrics


def test_kubernetes_pods_require_the_metrics_token_from_a_secret_and_prometheus_sends_it():
    found = manifests()
    reference = {"secretKeyRef": {"name": "agentserver-metrics", "key": "token"}}
    for role in ("web", "worker"):
        container = found[f"Deployment/agentserver-{role}"]["spec"]["template"]["spec"]["containers"][0]
        token = next(e for e in container["env"] if e["name"] == "METRICS_TOKEN")
        assert token == {"name": "METRICS_TOKEN", "valueFrom": reference}, role  # not optional: no pod without it
    # No token or way around it is shipped in the manifests themselves.
    assert "Secret/agentserver-metrics" not in found
    for document in found.values():
        assert "METRICS_TOKEN" not in document.get("data", {}) and "METRICS_TOKEN" not in document.get("stringData", {})
        assert "METRICS_PUBLIC" not in every_value(document)
    monitor = yaml.safe_load((ROOT / "deploy" / "k8s" / "monitoring.yaml").read_text())
    assert monitor["kind"] == "PodMonitor" and monitor["spec"]["selector"]["matchLabels"] == {"app": "agentserver"}
    endpoints = {e["port"]: e for e in monitor["spec"]["podMetricsEndpoints"]}
    ports = {
        role: found[f"Deployment/agentserver-{role}"]["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"]
        for role in ("web", "worker")
    }
    assert set(endpoints) == set(ports.values())
    for endpoint in endpoints.values():
        assert endpoint["path"] == "/metrics"
        assert endpoint["authorization"] == {
            "type": "Bearer",
            "credentials": {"name": "agentserver-metrics", "key": "token"},
        }


def test_no_image_or_deployment_makes_the_development_superuser_or_keeps_the_demo_key():
    """`make run` alone passes seed_demo --admin-file (a superuser with a password kept on
    disk) and --key-file: the image, compose and Kubernetes never do."""
    shipped = [ROOT / "Dockerfile", ROOT / "docker-compose.yml", *sorted((ROOT / "deploy").rglob("*"))]
    for path in (p for p in shipped if p.is_file()):
        text = path.read_text()
        for word in ("--admin-file", "--key-file", "admin-password", "demo-key", "superuser_ensure"):
            assert word not in text, f"{path.relative_to(ROOT)} mentions {word}"
    assert "--admin-file" in (ROOT / "scripts" / "run.sh").read_text()
