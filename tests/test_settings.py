"""Production settings whose loss no in-process test would notice (the suite runs on
agentserver.test_settings, which changes some of them)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def production_settings(**env: str) -> dict:
    """What agentserver.settings makes of an environment, read in a fresh interpreter."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DB_", "AGENTSERVER_", "REDIS_CHANNEL"))}
    script = (
        "import json, django; from django.conf import settings; django.setup(); "
        "print(json.dumps({'db': settings.DATABASES['default'], "
        "'channels': settings.REDIS_CHANNEL_PREFIX}, default=str))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**clean, "DJANGO_SETTINGS_MODULE": "agentserver.settings", **env},
    )
    return json.loads(out.stdout)


def test_connections_are_reused_through_psycopg_s_pool_not_kept_per_thread():
    # Under ASGI the ORM runs on threads that come and go; a persistent connection per
    # thread would leak. The pool takes each call's connection back when it returns.
    db = production_settings(DATABASE_URL="postgres://postgres@127.0.0.1:5432/agentserver")["db"]
    assert db["ENGINE"] == "agentserver.postgres"  # Django's, skipping sessions Postgres ended
    assert db["CONN_MAX_AGE"] == 0
    assert db["OPTIONS"]["pool"] == {"min_size": 2, "max_size": 20, "timeout": 2.0}


def test_the_pool_s_size_comes_from_the_environment():
    db = production_settings(DB_POOL_MAX="40")["db"]
    assert db["OPTIONS"]["pool"]["max_size"] == 40


def test_two_deployments_on_one_redis_publish_on_channels_of_their_own():
    # Pub/sub ignores Redis's databases; without this, hints and account changes cross over.
    assert production_settings(REDIS_URL="redis://127.0.0.1:6379/0")["channels"] == "agentserver:0:"
    assert production_settings(REDIS_URL="redis://127.0.0.1:6379/3")["channels"] == "agentserver:3:"
    assert production_settings(REDIS_CHANNEL_PREFIX="blue:")["channels"] == "blue:"
