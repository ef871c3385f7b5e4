"""Settings for the test suite: the normal ones, with test-only defaults set first.

Kept apart because pytest-django reads settings before any conftest runs.
"""

import os

# Keep test traffic off the development Redis database, and give each test session its own
# Celery queue so two sessions on one machine never take each other's work.
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
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

from .settings import *  # noqa: E402,F403
