"""Settings for the test suite: the normal ones, with test-only defaults set first.

Kept apart because pytest-django reads settings before any conftest runs.
"""

import os

# Keep test traffic off the development Redis database, and give each test session its own
# Celery queue so two sessions on one machine never take each other's work.
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")


def _worker_redis_dbs(url: str, worker: str) -> tuple[str, str]:
    """This pytest process's Redis database and the rate limiter's (which its tests flush), as
    URLs. Under pytest-xdist worker gwN takes the N-th database after the one REDIS_URL names
    and the limiter the N-th after the eight that follow it (mod 16, Redis's default count), so
    up to eight workers share one Redis server without meeting: what a test flushes, counts or
    watches (MONITOR) is its worker's alone. The subprocesses a worker starts inherit its URL."""
    from urllib.parse import urlsplit, urlunsplit

    index = int(worker.removeprefix("gw") or 0)
    assert index < 8, f"at most 8 pytest-xdist workers share one Redis server (16 databases), not {worker}"
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)

    def db(n: int) -> str:
        return urlunsplit(parts._replace(path=f"/{n % 16}"))

    return db(base + index), db(base + 8 + index)


os.environ["REDIS_URL"], os.environ["TEST_LIMITER_REDIS_URL"] = _worker_redis_dbs(
    os.environ["REDIS_URL"], os.environ.get("PYTEST_XDIST_WORKER", "")
)
os.environ.setdefault("CELERY_QUEUE", f"agentserver-test-{os.getpid()}")
# In-process tests gain nothing from a pool, and asgiref's threads would keep its connections
# checked out; the live stack (tests/conftest.py) runs daphne with the pool, as production does.
os.environ.setdefault("DB_POOL", "0")
# ... and run the views' ORM calls on the test's own thread, so they see its transaction.
os.environ.setdefault("DB_THREADS", "0")
# Tests create and delete agents and keys under the same names; caching them would leak
# across tests (tests of the cache itself switch it on).
os.environ.setdefault("AUTH_CACHE_SECONDS", "0")
os.environ.pop("AGENTSERVER_EMBEDDED", None)
# Push: the tests' receivers listen on 127.0.0.1 and nothing else is allowed (refusals are
# tested with 127.0.0.2 and ::ffff:127.0.0.3); retries come fast and give up soon.
os.environ.setdefault("OUTBOUND_ALLOW_NETS", "127.0.0.1/32")
os.environ.setdefault("PUSH_TIMEOUT", "2")
os.environ.setdefault("PUSH_BACKOFF_BASE", "0.05")
os.environ.setdefault("PUSH_BACKOFF_CAP", "0.2")
os.environ.setdefault("PUSH_RETRY_AFTER_MAX", "5")
os.environ.setdefault("PUSH_MAX_ATTEMPTS", "4")
os.environ.setdefault("PUSH_KEY_PUBLISH_DELAY", "0")
# Webhook agents: the tests' endpoints are plain http on 127.0.0.1; retries come fast.
os.environ.setdefault("WEBHOOK_ALLOW_HTTP", "1")
os.environ.setdefault("WEBHOOK_RETRY_BACKOFF", "0.05")
os.environ.setdefault("WEBHOOK_RETRY_AFTER_MAX", "2")
os.environ.setdefault("WEBHOOK_CANCEL_CHECK_EVERY", "0.2")
# Tests must never send a DNS query off the machine: the registry's domain proofs ask this
# (nothing answers on the discard port); a test that needs DNS starts its own loopback server
# (tests/dns_server.py) and overrides the setting.
os.environ.setdefault("REGISTRY_DNS_NAMESERVERS", "127.0.0.1:9")
# No collectstatic before the tests: the admin's files come from the apps' static/ folders, here
# and in the live stack's daphne (tests/test_static.py collects them, as `make run` does).
os.environ.setdefault("STATIC_FROM_APPS", "1")
# Django's cache (throttles, login counts) is Redis: each test session keeps to its own keys.
os.environ.setdefault("CACHE_KEY_PREFIX", f"agentserver-test-{os.getpid()}")
# The registry's API tests post far more than a person would; its throttle's own test sets a rate.
os.environ.setdefault("REGISTRY_WRITE_RATE", "")
os.environ.setdefault("TENANT_API_WRITE_RATE", "")
# A failed group join answers at once in tests (the hostile invitations are many); the test of
# the equal answer sets its own delay.
os.environ.setdefault("AIP_GROUP_FAILED_JOIN_AFTER", "0")

# No heartbeat thread in the test process (it would hold a connection to the test database
# through its teardown); the live stacks turn worker liveness on as production has it.
os.environ.setdefault("RUN_LIVENESS_TIMEOUT", "0")

from .settings import *  # noqa: E402,F403
from .settings import DATABASES  # noqa: E402 - named, as it is changed below

# WhiteNoise would warn at every test client's first request that STATIC_ROOT, never collected
# into, does not exist.
STATIC_ROOT = None
# ... and, finding files through the apps' static folders, it would list and stat every one of
# them (the admin's hundreds) for each test client, at its first request (8% of the admin
# tests' time). Looked up when asked for instead, as under DEBUG (tests/test_static.py puts the
# production setting back where it tests production's serving).
WHITENOISE_AUTOREFRESH = True

# Hashing a password the production way costs about half a second here, and the admin tests
# make and log in hundreds of users: tests hash fast. PBKDF2 stays listed for the servers the
# tests start with the production settings (a user they log in is hashed with it explicitly).
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]

# The suite's own connections need no durability: a commit does not wait for its WAL to reach
# the disk (a transactional test's flush of every table was most of its time). The servers the
# live tests start use the production settings, and so keep it.
if "postgres" in DATABASES["default"]["ENGINE"]:
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = "-c synchronous_commit=off"
