"""Settings come from environment variables (twelve-factor), read once here.

`AGENTSERVER_EMBEDDED=1` selects the embedded default, for a machine with no Postgres or Redis:
SQLite, no Redis, and background work (agents' runs, push deliveries, timeouts, beat's sweeps) on
threads of the web process (`BACKGROUND_WORK=threads`, agentserver/background.py). Everything
else expects both.
"""

from __future__ import annotations

from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured
from redis.connection import parse_url as parse_redis_url

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

DEBUG = env.bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="dev-insecure-change-me-" + "x" * 32)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

# Cards and URLs in responses use this when set (behind a proxy); otherwise the request's host.
PUBLIC_BASE_URL = env.str("PUBLIC_BASE_URL", default="").rstrip("/")

EMBEDDED = env.bool("AGENTSERVER_EMBEDDED", default=False)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    # Swagger UI's files for the API's docs page (/api/docs/), served by the server itself
    "drf_spectacular_sidecar",
    "accounts",
    "registry",
    "tasks_app",
    "push",
    "protocols",
    "groups",
    "tenant_api",
    "ops",
]

# Messages live in the session, not in a cookie: one of them carries a new API key's plaintext,
# shown once, which must not travel back and forth in a cookie the browser keeps.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

MIDDLEWARE = [
    # A request on a host name bound to an agent goes to the agent's view, and no further
    # (protocols.hosts): that name is not in ALLOWED_HOSTS, and serves nothing else.
    "protocols.hosts.BoundHostMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files are answered here, before sessions, CSRF or users are looked at.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "agentserver.urls"
ASGI_APPLICATION = "agentserver.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------
# Under ASGI every request may run its ORM work on a fresh thread, so persistent
# connections leak; psycopg's pool is the supported way to reuse connections (Django 5.1+).
if EMBEDDED:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": env.str("SQLITE_PATH", default=str(BASE_DIR / ".data" / "db.sqlite3")),
            # Background threads write while requests read: in WAL a reader never waits for
            # a writer, and writers queue for up to `timeout` seconds.
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }
else:
    DATABASES = {"default": env.db_url("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/agentserver")}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        DATABASES["default"]["ENGINE"] = "agentserver.postgres"  # skips sessions Postgres ended
    # Only the hot path's fixed statements (tasks_app.sql, on server-bound cursors) are
    # prepared; Django's own queries bind on the client and never are. Turn it off
    # (DB_PREPARE=0) behind a transaction pooler that cannot carry prepared statements.
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = (
        1 if env.bool("DB_PREPARE", default=True) else None
    )
    if env.bool("DB_POOL", default=True):
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": env.int("DB_POOL_MIN", default=2),
            "max_size": env.int("DB_POOL_MAX", default=20),
            # How long a request waits for a connection while none can be made (Postgres is
            # away) before it is answered 503 with Retry-After; a busy pool never makes one
            # wait, as DB_THREADS <= DB_POOL_MAX.
            "timeout": env.float("DB_POOL_TIMEOUT", default=2.0),
        }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis, Celery -------------------------------------------------------------------
REDIS_URL = "" if EMBEDDED else env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")
# Redis's pub/sub channels (task hints, account changes) belong to the whole server, not to a
# database: without a prefix of their own, two deployments (or test runs) on one Redis hear each
# other, waking waiters for nothing and dropping each other's authentication caches. The
# default names the database of REDIS_URL; set it where two deployments share one database.
REDIS_CHANNEL_PREFIX = env.str(
    "REDIS_CHANNEL_PREFIX",
    default=f"agentserver:{parse_redis_url(REDIS_URL).get('db', 0)}:" if REDIS_URL else "agentserver:",
)

CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL or "memory://")
# A Redis broker gets our transport (agentserver/broker.py), and runs are published without
# re-declaring their queue (tasks_app.dispatch.enqueue_run).
BROKER_IS_REDIS = CELERY_BROKER_URL.startswith("redis://")
if BROKER_IS_REDIS:
    CELERY_BROKER_TRANSPORT = "agentserver.broker:Transport"
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_QUEUE", default="agentserver")
CELERY_TASK_EAGER_PROPAGATES = False
# Where Celery's jobs run: "celery" (published to the broker, for the workers and beat) or
# "threads" (on BACKGROUND_THREADS threads of this process, beat's schedule on a timer thread:
# agentserver/background.py). "threads" is the embedded mode's; it also serves a single web
# process on Postgres without Redis (REDIS_URL="": its wake-ups stay in-process).
BACKGROUND_WORK = env.str("BACKGROUND_WORK", default="threads" if EMBEDDED else "celery")
if BACKGROUND_WORK not in ("celery", "threads"):
    raise ImproperlyConfigured(f"BACKGROUND_WORK must be 'celery' or 'threads', not {BACKGROUND_WORK!r}")
BACKGROUND_THREADS = env.int("BACKGROUND_THREADS", default=4)
CELERY_TASK_IGNORE_RESULT = True
# A failed publish is not retried in the request: the run stays committed and unclaimed, and
# the sweeper enqueues it again (tasks_app.dispatch.enqueue_run).
CELERY_TASK_PUBLISH_RETRY = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = False
# Prefork children per worker. A child spends most of a run waiting (on Postgres commits,
# which wait for the WAL to reach disk, and on the agent's own I/O), so two per core kept
# the cores busier: on the 2-core benchmark machine 4 children served 13-49 % more blocking
# echoes than 2 at c=32 in interleaved runs; 6 served fewer.
CELERY_WORKER_CONCURRENCY = env.int("WORKER_CONCURRENCY", default=4)
CELERY_WORKER_PREFETCH_MULTIPLIER = env.int("CELERY_PREFETCH", default=4)
# The queue of async executors' runs, served by the run host (a worker with the threads pool:
# `celery worker -P threads -c 1000 -Q <this>`, whose threads hand each run to one asyncio loop of
# the process, tasks_app/runhost.py). Empty: their runs go to the prefork workers with every
# other run, and each waits there in a process of its own, as a sync executor's does.
ASYNC_RUNS_QUEUE = env.str("ASYNC_RUNS_QUEUE", default="")
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# A runaway executor is stopped by the soft limit (its task becomes `failed` with a reason);
# the hard limit kills the child.
AGENT_SOFT_TIME_LIMIT = env.int("AGENT_SOFT_TIME_LIMIT", default=120)
AGENT_TIME_LIMIT = env.int("AGENT_TIME_LIMIT", default=AGENT_SOFT_TIME_LIMIT + 15)
# The broker is a doorbell, Postgres the ledger: every run and push delivery is committed
# before its message is sent, and the sweepers send again what no worker claimed or finished.
# So kombu's ack emulation on Redis (two MULTI/EXEC per message, a third of the worker's main
# process under load) buys nothing here; without it, prefetched messages are still put back
# at a warm shutdown, and a worker that dies loses only messages the sweepers resend.
# For the same reason a publish while the broker is down fails at once (`max_retries: 0`):
# kombu's own connect retry slept 2 s and 4 s inside every request's commit hook, on a shared
# database thread, while the sweeper would send the run anyway. The worker's reconnect loop
# passes its own limit (CELERY_BROKER_CONNECTION_MAX_RETRIES) and is not affected.
CELERY_BROKER_TRANSPORT_OPTIONS = {"ack_emulation": False, "max_retries": 0}

# Work committed but not claimed after this long is enqueued again by the sweeper.
SWEEP_UNCLAIMED_AFTER = env.int("SWEEP_UNCLAIMED_AFTER", default=30)
# A run claimed longer ago than the hard limit plus this grace lost its worker (SIGKILL, OOM, a
# deploy): the sweeper runs it again, up to AGENT_RUN_RETRIES times per run for an executor
# that declares itself safe to re-run (`Executor.rerunnable`), then fails it `worker-lost`.
SWEEP_LOST_GRACE = env.int("SWEEP_LOST_GRACE", default=60)
AGENT_RUN_RETRIES = env.int("AGENT_RUN_RETRIES", default=2)
# Worker liveness (tasks_app.holders, tasks_app.liveness): each process that runs agents beats
# every RUN_HEARTBEAT_EVERY seconds from a thread of its own; a run whose process fell
# RUN_LIVENESS_TIMEOUT behind is taken from it (as a lost run, above) by a sweep every
# RUN_LIVENESS_CHECK_EVERY seconds: within timeout + check of a kill. A timeout of 0 turns it
# off (no heartbeat; lost runs wait for the sweep above).
RUN_HEARTBEAT_EVERY = env.float("RUN_HEARTBEAT_EVERY", default=2.0)
RUN_LIVENESS_TIMEOUT = env.float("RUN_LIVENESS_TIMEOUT", default=10.0)
RUN_LIVENESS_CHECK_EVERY = env.float("RUN_LIVENESS_CHECK_EVERY", default=2.0)
if RUN_LIVENESS_TIMEOUT and not 0 < RUN_HEARTBEAT_EVERY * 2 <= RUN_LIVENESS_TIMEOUT:
    raise ImproperlyConfigured("RUN_HEARTBEAT_EVERY must be positive and at most half of RUN_LIVENESS_TIMEOUT")
# Each periodic job (the sweepers, below and in the sections of push and the registry) runs in
# one process at a time, under a lease named after its beat entry (tasks_app/leases.py) that
# runs out after this many seconds if its holder died: keep it well above the longest sweep.
SWEEP_LEASE_SECONDS = env.float("SWEEP_LEASE_SECONDS", default=300.0)
CELERY_BEAT_SCHEDULE = {
    "sweep-stuck-work": {
        "task": "tasks_app.tasks.sweep_stuck_work",
        "schedule": env.float("SWEEP_EVERY", default=15.0),
    },
    "sweep-lost-runs": {
        "task": "tasks_app.tasks.sweep_lost_runs",
        "schedule": RUN_LIVENESS_CHECK_EVERY,
    },
    # Each timeout is also a job of its own, due when it runs out; this closes what those missed.
    "sweep-awaiting": {
        "task": "tasks_app.tasks.sweep_awaiting",
        "schedule": env.float("AWAITING_SWEEP_EVERY", default=15.0),
    },
}

# --- Protocol knobs ------------------------------------------------------------------
# A blocking SendMessage waits at most this long, then answers with the task as it is.
A2A_BLOCKING_TIMEOUT = env.float("A2A_BLOCKING_TIMEOUT", default=AGENT_TIME_LIMIT + 10)
# ACPs AIP (docs/aip.md): an rpc start or continue waits this long at most for the task to
# settle (less if the Leader's responseTimeout says so); times are written in this zone
# (the seed's default is Beijing time).
AIP_RESPONSE_TIMEOUT = env.float("AIP_RESPONSE_TIMEOUT", default=A2A_BLOCKING_TIMEOUT)
AIP_TIME_ZONE = env.str("AIP_TIME_ZONE", default="Asia/Shanghai")
# Operations (docs/operations.md): /readyz asks each dependency with this timeout (seconds),
# and fails when the oldest run no worker took has waited longer than READY_MAX_QUEUE_AGE
# (0: never). /metrics answers only with METRICS_ENABLED, and then only to a bearer of
# METRICS_TOKEN; without a token, to no one (the metrics name every tenant's agents) unless
# DEBUG or METRICS_PUBLIC (the network alone keeps them private: `make run`, on loopback).
# The store's gauges are read at most every METRICS_STORE_EVERY s.
READY_TIMEOUT = env.float("READY_TIMEOUT", default=2.0)
READY_MAX_QUEUE_AGE = env.float("READY_MAX_QUEUE_AGE", default=300.0)
METRICS_ENABLED = env.bool("METRICS_ENABLED", default=False)
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
METRICS_PUBLIC = env.bool("METRICS_PUBLIC", default=False)
METRICS_STORE_EVERY = env.float("METRICS_STORE_EVERY", default=10.0)
# A Celery worker's main process serves its prefork children's counts (summed from
# PROMETHEUS_MULTIPROC_DIR) on this port, for a pod Prometheus scrapes (0: off). Plain HTTP,
# refused without METRICS_TOKEN when one is set: keep the port inside the cluster.
WORKER_METRICS_PORT = env.int("WORKER_METRICS_PORT", default=0)
WORKER_METRICS_ADDR = env.str("WORKER_METRICS_ADDR", default="0.0.0.0")
# The same for serve_grpc's process (a gRPC pod): its counts on this port (0: off), at this address.
GRPC_METRICS_PORT = env.int("GRPC_METRICS_PORT", default=0)
GRPC_METRICS_ADDR = env.str("GRPC_METRICS_ADDR", default="0.0.0.0")
# OpenTelemetry traces (agentserver/tracing.py): "otlp" (with the SDK's OTEL_EXPORTER_OTLP_*
# variables), "console", or "file:<path>"; empty: off.
TRACING_EXPORTER = env.str("TRACING_EXPORTER", default="")
# Waiters re-read the database this often even when no hint arrives: a lost hint costs this much.
HINT_FALLBACK_POLL = env.float("HINT_FALLBACK_POLL", default=2.0)
# An SSE stream sends a keep-alive comment after this many quiet seconds, and reads the event
# log then whether or not a hint came: a lost hint delays an event by at most this much.
SSE_HEARTBEAT = env.float("SSE_HEARTBEAT", default=15.0)
# On SIGTERM daphne stops listening, ends its streams and gives the requests in flight this
# many seconds to finish (agentserver/shutdown.py): keep it under the grace period of whatever
# sends the SIGTERM (docker stop: 10 s; Kubernetes: 30 s).
SHUTDOWN_GRACE = env.float("SHUTDOWN_GRACE", default=8.0)
# The gRPC binding (protocols/grpc_server.py, `manage.py serve_grpc`): its own process on this
# port; 0 = not served, and the cards list no gRPC interface. GRPC_PUBLIC_URL is the `host:port`
# clients reach it at (behind a proxy, or on another name); empty: the card's own host name with
# GRPC_PORT.
GRPC_PORT = env.int("GRPC_PORT", default=0)
GRPC_PUBLIC_URL = env.str("GRPC_PUBLIC_URL", default="")
# What serve_grpc runs before its servers start, returning their interceptors: this project's
# traces and metrics port (a dotted path, as ASGI_APPLICATION is; the gRPC layer cannot import
# the project package).
GRPC_SERVER_SETUP = "agentserver.grpc_process.setup"
# ORM work of the async protocol views runs on this many shared threads (tasks_app.dbcalls);
# keep it at or below DB_POOL_MAX. 0 = Django's per-request threads.
DB_THREADS = env.int("DB_THREADS", default=12)
# Seconds a DB thread keeps its connection without a call before it goes back to the pool
# (tasks_app.dbcalls): well under DB_POOL_TIMEOUT, so that nobody else's wait for one nears it.
DB_THREAD_IDLE = env.float("DB_THREAD_IDLE", default=0.5)
# Web and worker processes freeze what they loaded at start out of the garbage collector's
# reach and collect the young generation after this many allocations (Python's default is
# 700; 0 keeps it): see agentserver/runtime.py.
GC_GEN0_THRESHOLD = env.int("GC_GEN0_THRESHOLD", default=20000)
# Agents and API keys found by protocol requests are cached in-process this long (seconds);
# a revoked key or a changed agent takes effect within it. 0 = no cache.
AUTH_CACHE_SECONDS = env.float("AUTH_CACHE_SECONDS", default=5.0)
# A new API key expires API_KEY_DEFAULT_LIFETIME seconds after it is made unless its maker
# names an expiry, which may be at most API_KEY_MAX_LIFETIME away (accounts.services.
# api_key_expiry): a key made from a short-lived token must not outlive it for ever.
API_KEY_DEFAULT_LIFETIME = env.float("API_KEY_DEFAULT_LIFETIME", default=90 * 24 * 3600.0)
API_KEY_MAX_LIFETIME = env.float("API_KEY_MAX_LIFETIME", default=365 * 24 * 3600.0)
if not 0 < API_KEY_DEFAULT_LIFETIME <= API_KEY_MAX_LIFETIME:
    raise ImproperlyConfigured("API_KEY_DEFAULT_LIFETIME must be positive and at most API_KEY_MAX_LIFETIME")
# Card caching (seconds): our agents' cards are served with this max-age, and a fronted
# agent's upstream card (tasks_app/executors/upstream/) is kept this long in each process.
AGENT_CARD_MAX_AGE = env.int("AGENT_CARD_MAX_AGE", default=300)
# Card signatures (protocols/card_signing.py): a rotated-in card key is published this many
# seconds before it signs, so clients caching the card key set (served with max-age
# CARD_JWKS_MAX_AGE) know it before they meet a card it signed.
CARD_KEY_PUBLISH_DELAY = env.float("CARD_KEY_PUBLISH_DELAY", default=3600.0)
CARD_JWKS_MAX_AGE = env.int("CARD_JWKS_MAX_AGE", default=300)
# Fronted A2A agents (docs/executors.md): at most this many bytes of an upstream's card, and of
# any one of its answers (a stream counts all its events; past it, the task fails).
UPSTREAM_CARD_MAX_BYTES = env.int("UPSTREAM_CARD_MAX_BYTES", default=256 * 1024)
UPSTREAM_RESPONSE_MAX_BYTES = env.int("UPSTREAM_RESPONSE_MAX_BYTES", default=16 * 1024 * 1024)

# --- Limits per caller and per tenant (docs/limits.md) ----------------------------------
# Requests per minute per API key or bearer subject, and per anonymous client address, unless
# the tenant sets its own (accounts.Tenant); 0 = unlimited. A caller may spend a minute's
# allowance at once, then is admitted at an even rate (protocols/throttle.py). The official
# conformance suite runs anonymously from one address: keep the anonymous default above what
# it sends in a minute.
RATE_LIMIT_PER_MINUTE = env.int("RATE_LIMIT_PER_MINUTE", default=6000)
ANONYMOUS_RATE_LIMIT_PER_MINUTE = env.int("ANONYMOUS_RATE_LIMIT_PER_MINUTE", default=1200)
# Where the counts are shared by every web process; empty (the embedded mode): in-process.
RATE_LIMIT_REDIS_URL = env.str("RATE_LIMIT_REDIS_URL", default=REDIS_URL)
# Tasks with a run queued or running at once over all of a tenant's agents; 0 = unlimited.
TENANT_MAX_ACTIVE_TASKS = env.int("TENANT_MAX_ACTIVE_TASKS", default=1000)
# Retry-After (seconds) of a send refused because the tenant is at its active-task cap.
TENANT_ACTIVE_TASKS_RETRY_AFTER = env.int("TENANT_ACTIVE_TASKS_RETRY_AFTER", default=5)
# Bytes of messages and task events (agent messages, artifacts, statuses) a tenant may store;
# 0 = unlimited. The count is kept by a beat job (below), so a tenant may pass its quota by
# what it writes between two counts; its sends are refused from then on.
TENANT_MAX_STORED_BYTES = env.int("TENANT_MAX_STORED_BYTES", default=1024**3)
# Of TENANT_MAX_ACTIVE_TASKS, how many callers without a key (one principal, "anonymous") may
# hold at once, so that traffic to a public agent cannot starve the tenant's keyed callers.
TENANT_MAX_ACTIVE_ANONYMOUS_TASKS = env.int("TENANT_MAX_ACTIVE_ANONYMOUS_TASKS", default=200)
# Open SSE streams per caller (API key, bearer subject, or all anonymous callers together) per
# tenant, over every web process (counted in Redis; a slot of a killed process expires after
# STREAM_SLOT_TTL seconds without its stream's heartbeat renewing it). 0 = unlimited.
STREAM_MAX_PER_CALLER = env.int("STREAM_MAX_PER_CALLER", default=100)
STREAM_RETRY_AFTER = env.int("STREAM_RETRY_AFTER", default=30)
# Rows younger than this (seconds) are left to the next count: a transaction still open may
# yet commit a row with a smaller id. The full recount, every STORAGE_RECOUNT_EVERY seconds,
# sets any drift right (and counts what deleted tasks freed).
STORAGE_COUNT_SETTLE = env.float("STORAGE_COUNT_SETTLE", default=10.0)
STORAGE_RECOUNT_EVERY = env.float("STORAGE_RECOUNT_EVERY", default=24 * 3600.0)
CELERY_BEAT_SCHEDULE["count-stored-bytes"] = {
    "task": "tasks_app.tasks.count_stored_bytes",
    "schedule": env.float("STORAGE_COUNT_EVERY", default=60.0),
}

# --- AIP group mode (groups/, docs/groups.md) -----------------------------------------------
# Whether hosted agents accept AIP group invitations (off: the `group` method answers -32007).
AIP_GROUPS_ENABLED = env.bool("AIP_GROUPS_ENABLED", default=True)
# Seconds to connect to a group's broker and open the connection (the invitation waits this long).
AIP_GROUP_CONNECT_TIMEOUT = env.float("AIP_GROUP_CONNECT_TIMEOUT", default=5.0)
# An invitation whose broker was not joined (address not allowed, name not resolved, port closed,
# silent or not AMQP) is answered this many seconds after it came, whichever it was: otherwise
# how soon it failed tells a caller what is behind an address (a TCP port probe through us).
AIP_GROUP_FAILED_JOIN_AFTER = env.float("AIP_GROUP_FAILED_JOIN_AFTER", default=AIP_GROUP_CONNECT_TIMEOUT + 2)
# Seconds between the group runner's looks at the memberships (new ones, left ones).
AIP_GROUPS_POLL = env.float("AIP_GROUPS_POLL", default=1.0)
# Seconds between a robust connection's attempts to reach a broker it lost.
AIP_GROUP_RECONNECT_INTERVAL = env.float("AIP_GROUP_RECONNECT_INTERVAL", default=2.0)
# Live group memberships (each a held AMQP connection) one principal may have on a tenant's
# agents; and all anonymous callers together on a tenant's public agents (0: none may join).
GROUP_MAX_MEMBERSHIPS_PER_CALLER = env.int("GROUP_MAX_MEMBERSHIPS_PER_CALLER", default=10)
GROUP_MAX_ANONYMOUS_MEMBERSHIPS = env.int("GROUP_MAX_ANONYMOUS_MEMBERSHIPS", default=0)

# --- Push notifications (push/) --------------------------------------------------------
# Outgoing requests never go to loopback, private, link-local, multicast, reserved or CGNAT
# addresses, except those in these comma-separated CIDRs (e.g. "10.1.2.0/24,::1/128").
OUTBOUND_ALLOW_NETS = env.list("OUTBOUND_ALLOW_NETS", default=[])
# The registry (registry/): nameservers asked for domain proofs' TXT records, "ip" or "ip:port",
# comma-separated (empty: the system's resolv.conf), so an operator can pin a trusted resolver.
REGISTRY_DNS_NAMESERVERS = env.list("REGISTRY_DNS_NAMESERVERS", default=[])
# Seconds a domain proof may take (the well-known file: per connect and per read; DNS: in all),
# and a liveness probe of an agent's endpoint (per connect and per read): a slow host is not
# allowed to hold a worker.
REGISTRY_PROOF_TIMEOUT = env.float("REGISTRY_PROOF_TIMEOUT", default=5.0)
REGISTRY_PROBE_TIMEOUT = env.float("REGISTRY_PROBE_TIMEOUT", default=5.0)
# Bearer tokens (protocols/oidc.py, docs/oidc.md): a tenant issuer's JWKS is kept this long
# (seconds; a token naming an unknown key fetches it again, at most every 30 s), and fetching
# it may take this long per connect and per read.
OIDC_JWKS_CACHE_SECONDS = env.float("OIDC_JWKS_CACHE_SECONDS", default=300.0)
OIDC_JWKS_TIMEOUT = env.float("OIDC_JWKS_TIMEOUT", default=3.0)
# Seconds to connect, and between bytes of the answer, per attempt.
PUSH_TIMEOUT = env.float("PUSH_TIMEOUT", default=5.0)
# Attempts per event before its delivery (and the config, which keeps event order) is dead.
PUSH_MAX_ATTEMPTS = env.int("PUSH_MAX_ATTEMPTS", default=12)
# Retry n waits min(cap, base * 2**(n-1)) seconds, scaled by a random factor in [0.5, 1];
# a Retry-After answer is honoured up to PUSH_RETRY_AFTER_MAX.
PUSH_BACKOFF_BASE = env.float("PUSH_BACKOFF_BASE", default=2.0)
PUSH_BACKOFF_CAP = env.float("PUSH_BACKOFF_CAP", default=900.0)
PUSH_RETRY_AFTER_MAX = env.float("PUSH_RETRY_AFTER_MAX", default=1800.0)
# At most this much of a receiver's answer is read (and the first 500 bytes of an error kept).
PUSH_RESPONSE_MAX_BYTES = env.int("PUSH_RESPONSE_MAX_BYTES", default=65536)
# The signature: issuer (`iss`), lifetime (`exp - iat`) and the clock leeway a receiver may
# apply; a retired key stays in the JWKS for lifetime + leeway after its last signature.
PUSH_JWS_ISSUER = env.str("PUSH_JWS_ISSUER", default=PUBLIC_BASE_URL or "agentserver")
PUSH_JWS_LIFETIME = env.int("PUSH_JWS_LIFETIME", default=300)
PUSH_JWS_LEEWAY = env.int("PUSH_JWS_LEEWAY", default=60)
# A rotated-in key is published this many seconds before it starts signing, so receivers
# caching the JWKS (it is served with max-age=PUSH_JWKS_MAX_AGE) know it first.
PUSH_KEY_PUBLISH_DELAY = env.float("PUSH_KEY_PUBLISH_DELAY", default=3600.0)
PUSH_JWKS_MAX_AGE = env.int("PUSH_JWKS_MAX_AGE", default=300)
# Fernet key(s) for credentials, tokens and signing keys at rest, comma-separated (the first
# encrypts, all decrypt). Empty: a key derived from DJANGO_SECRET_KEY.
PUSH_CREDENTIALS_KEY = env.list("PUSH_CREDENTIALS_KEY", default=[])
# Push configs per task (every dialect's set, an inline config, AIP's start); 0 = unlimited.
# Each event is sent to every config, so this bounds what one event can fan out into.
PUSH_MAX_CONFIGS_PER_TASK = env.int("PUSH_MAX_CONFIGS_PER_TASK", default=10)
# AIP configs set ahead of a task not started yet, per caller per tenant; 0 = unlimited. They
# expire after PUSH_PENDING_CONFIG_TTL seconds (ignored from then on; the sweep deletes them).
PUSH_MAX_PENDING_CONFIGS = env.int("PUSH_MAX_PENDING_CONFIGS", default=100)
PUSH_PENDING_CONFIG_TTL = env.int("PUSH_PENDING_CONFIG_TTL", default=3600)
CELERY_BEAT_SCHEDULE["sweep-push-deliveries"] = {
    "task": "push.tasks.sweep_deliveries",
    "schedule": env.float("PUSH_SWEEP_EVERY", default=30.0),
}

# --- Webhook agents (tasks_app/executors/webhook.py, docs/executors.md) -----------------
# An agent's endpoint must be https; plain http only when this is set (local development, the
# tests, `make run`). Checked when the agent is saved and again at every run.
WEBHOOK_ALLOW_HTTP = env.bool("WEBHOOK_ALLOW_HTTP", default=False)
# The most an agent's `max_response_bytes` may be (and its default), and the longest line
# (one action) of a streamed answer.
WEBHOOK_RESPONSE_MAX_BYTES = env.int("WEBHOOK_RESPONSE_MAX_BYTES", default=4 * 1024 * 1024)
WEBHOOK_LINE_MAX_BYTES = env.int("WEBHOOK_LINE_MAX_BYTES", default=1024 * 1024)
# A request that could not be delivered (no connection, dropped before an answer, 429/502/
# 503/504) is tried again after this many seconds, doubled each time (times a random factor
# in [0.5, 1]); a Retry-After is honoured up to WEBHOOK_RETRY_AFTER_MAX. Never past the run's
# own timeout.
WEBHOOK_RETRY_BACKOFF = env.float("WEBHOOK_RETRY_BACKOFF", default=0.5)
WEBHOOK_RETRY_AFTER_MAX = env.float("WEBHOOK_RETRY_AFTER_MAX", default=10.0)
# While an endpoint sends nothing, its run asks the store whether the task was canceled this
# often (seconds); between actions the writes themselves find out, at no cost.
WEBHOOK_CANCEL_CHECK_EVERY = env.float("WEBHOOK_CANCEL_CHECK_EVERY", default=1.0)

# --- The registry (registry/, docs/registry.md) ------------------------------------------
# Hosted agents' cards in the directory carry this base URL (PUBLIC_BASE_URL when set).
REGISTRY_HOSTED_BASE_URL = env.str("REGISTRY_HOSTED_BASE_URL", default="http://localhost:8000").rstrip("/")
# Each entry's card is re-read and its endpoint probed every REGISTRY_CHECK_INTERVAL seconds;
# the beat job looking for due entries runs every REGISTRY_CHECK_EVERY seconds.
REGISTRY_CHECK_INTERVAL = env.float("REGISTRY_CHECK_INTERVAL", default=300.0)
# A failing entry is stale after this many failed checks in a row, or when its last good
# check is older than REGISTRY_STALE_AFTER seconds; healthy again at its next good check.
REGISTRY_STALE_AFTER_FAILURES = env.int("REGISTRY_STALE_AFTER_FAILURES", default=3)
REGISTRY_STALE_AFTER = env.float("REGISTRY_STALE_AFTER", default=3600.0)
# A card is read with at most this many bytes and seconds per request (a signature's key set:
# REGISTRY_JWKS_MAX_BYTES).
REGISTRY_CARD_MAX_BYTES = env.int("REGISTRY_CARD_MAX_BYTES", default=256 * 1024)
REGISTRY_CARD_FETCH_TIMEOUT = env.float("REGISTRY_CARD_FETCH_TIMEOUT", default=10.0)
REGISTRY_JWKS_MAX_BYTES = env.int("REGISTRY_JWKS_MAX_BYTES", default=64 * 1024)
# Checks are kept this many days (uptime is shown over 1, 7 and 30 days).
REGISTRY_CHECKS_KEPT_DAYS = env.int("REGISTRY_CHECKS_KEPT_DAYS", default=30)
# The directory's own conformance checks (registry.conformance, docs/registry.md) run on each
# approved entry every REGISTRY_CONFORMANCE_INTERVAL seconds: each request may take
# REGISTRY_CONFORMANCE_TIMEOUT seconds (per connect and per read), an entry's run
# REGISTRY_CONFORMANCE_BUDGET in all. Each run signs a fresh attestation valid for
# REGISTRY_ATTESTATION_LIFETIME seconds: longer than the interval, so an approved entry always
# has one, and short enough that a withdrawn one a verifier never re-checks dies anyway.
REGISTRY_CONFORMANCE_INTERVAL = env.float("REGISTRY_CONFORMANCE_INTERVAL", default=6 * 3600.0)
REGISTRY_CONFORMANCE_TIMEOUT = env.float("REGISTRY_CONFORMANCE_TIMEOUT", default=5.0)
REGISTRY_CONFORMANCE_BUDGET = env.float("REGISTRY_CONFORMANCE_BUDGET", default=30.0)
REGISTRY_ATTESTATION_LIFETIME = env.float("REGISTRY_ATTESTATION_LIFETIME", default=24 * 3600.0)
if not 0 < REGISTRY_CONFORMANCE_INTERVAL < REGISTRY_ATTESTATION_LIFETIME:
    raise ImproperlyConfigured("REGISTRY_CONFORMANCE_INTERVAL must be positive and below REGISTRY_ATTESTATION_LIFETIME")
# A remote entry's domain proof is looked for again every REGISTRY_PROOF_RECHECK_INTERVAL
# seconds (registry.freshness); after REGISTRY_PROOF_LAPSE_AFTER_FAILURES misses in a row it
# has lapsed: the entry goes back to review and its attestation is withdrawn.
REGISTRY_PROOF_RECHECK_INTERVAL = env.float("REGISTRY_PROOF_RECHECK_INTERVAL", default=24 * 3600.0)
REGISTRY_PROOF_LAPSE_AFTER_FAILURES = env.int("REGISTRY_PROOF_LAPSE_AFTER_FAILURES", default=2)
CELERY_BEAT_SCHEDULE["registry-check-entries"] = {
    "task": "registry.tasks.check_due_entries",
    "schedule": env.float("REGISTRY_CHECK_EVERY", default=60.0),
}

# Unproven drafts (a remote agent submitted whose domain nobody proved) are expired this many
# seconds after their submission, and expired entries dropped as long after that.
REGISTRY_DRAFT_LIFETIME = env.float("REGISTRY_DRAFT_LIFETIME", default=7 * 24 * 3600.0)
# A user has at most this many unproven drafts at once (0 = no cap).
REGISTRY_OPEN_DRAFTS_PER_USER = env.int("REGISTRY_OPEN_DRAFTS_PER_USER", default=20)

# Submissions, proofs, flags, decisions and token requests per user (else per address) in the
# REST API: "<n>/<sec|min|hour|day>", empty for none. Counted in CACHES (Redis: every process).
REGISTRY_WRITE_RATE = env.str("REGISTRY_WRITE_RATE", default="60/min")
# The registry's REST API tokens (registry.tokens): hashed, expiring this many seconds after
# they are made (POST /api/registry/token/, `manage.py registry_token`); a user keeps at most
# REGISTRY_TOKENS_PER_USER unexpired ones (a new one drops the oldest).
REGISTRY_TOKEN_LIFETIME = env.float("REGISTRY_TOKEN_LIFETIME", default=30 * 24 * 3600.0)
REGISTRY_TOKENS_PER_USER = env.int("REGISTRY_TOKENS_PER_USER", default=20)

# How many proxies in front of the web processes append to X-Forwarded-For (nginx in
# docker-compose.yml: 1). 0: the header is ignored and the client is the connection's address,
# as a header any client may send cannot name it (docs/limits.md, "Logins and the registry API").
NUM_PROXIES = env.int("NUM_PROXIES", default=0)

# Django's cache: the REST API's throttles and the login counts (accounts.logins) live here, so
# every process counts together. Redis (CACHE_REDIS_URL, else REDIS_URL); in-process without it.
CACHE_REDIS_URL = env.str("CACHE_REDIS_URL", default=REDIS_URL)
CACHE_KEY_PREFIX = env.str("CACHE_KEY_PREFIX", default="agentserver")
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": CACHE_REDIS_URL,
        "KEY_PREFIX": CACHE_KEY_PREFIX,
    }
    if CACHE_REDIS_URL
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "KEY_PREFIX": CACHE_KEY_PREFIX}
}

# Sign-ins (the registry's token endpoint and the admin's login form, accounts.logins): after
# LOGIN_FAILURES_PER_USERNAME failed attempts for one username, or LOGIN_FAILURES_PER_ADDRESS
# from one client address, within LOGIN_FAILURE_WINDOW seconds, that username (address) is
# refused for LOGIN_LOCKOUT_SECONDS, whatever the password. 0 turns a count off.
LOGIN_FAILURES_PER_USERNAME = env.int("LOGIN_FAILURES_PER_USERNAME", default=10)
LOGIN_FAILURES_PER_ADDRESS = env.int("LOGIN_FAILURES_PER_ADDRESS", default=50)
LOGIN_FAILURE_WINDOW = env.int("LOGIN_FAILURE_WINDOW", default=900)
LOGIN_LOCKOUT_SECONDS = env.int("LOGIN_LOCKOUT_SECONDS", default=900)

# The registry's REST API: its own hashed tokens for programs (above), the session for the
# browsable pages.
REST_FRAMEWORK = {
    "NUM_PROXIES": NUM_PROXIES,
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "registry.api.auth.RegistryTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticatedOrReadOnly"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
# The tenant API (/api/v1/, docs/api.md): writes per caller (a management key, an issuer's
# subject), e.g. "120/min"; empty: not throttled.
TENANT_API_WRITE_RATE = env.str("TENANT_API_WRITE_RATE", default="120/min")
# An invitation to a tenant (docs/tenancy.md, "Members") may be accepted for this many days.
MEMBERSHIP_INVITATION_DAYS = env.int("MEMBERSHIP_INVITATION_DAYS", default=7)

SPECTACULAR_SETTINGS = {
    "TITLE": "agentserver API",
    "DESCRIPTION": "The tenant API (/api/v1/: a tenant's members, API keys, OpenID Connect issuer, agents, "
    "tasks, push configs and delivery log; docs/api.md) and the registry API (/api/registry/: a curated "
    "directory of A2A and ACPs agents: search, entries, card versions, health, submission, domain proofs, "
    "flags, and the directory's conformance checks and signed attestations).",
    # The docs page (/api/docs/) loads Swagger UI from this server (drf-spectacular-sidecar),
    # and asks no validator elsewhere to check the document: no request leaves the machine.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # One name per choice set the registry API uses in more than one place (else the schema
    # would name them per field: StateD93Enum...).
    "ENUM_NAME_OVERRIDES": {
        "EntryStateEnum": "registry.models.State",
        "HealthEnum": "registry.models.Health",
        "KindEnum": "registry.models.Kind",
        "ManagementRoleEnum": "tenant_api.serializers.MANAGEMENT_ROLES",
        "TaskStateEnum": "tasks_app.lifecycle.TaskState",
        "DialectEnum": "tasks_app.lifecycle.Dialect",
        "DeliveryStateEnum": "push.models.DeliveryState",
        "PushConfigStatusEnum": "push.models.ConfigStatus",
        "GroupMembershipStateEnum": "groups.models.MembershipState",
        "HostStateEnum": "tenant_api.serializers.HOST_STATES",
    },
}

# --- Auth, i18n ------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Static files (the admin's CSS and JS) ---------------------------------------------
# WhiteNoise (in MIDDLEWARE) serves them from STATIC_ROOT, which `manage.py collectstatic`
# fills: `make run` and the image's build run it. They are stored a second time under names
# carrying a hash of their content, which the pages link to and browsers keep for good
# (Cache-Control: max-age=315360000, public, immutable), so a release that changes a file
# changes its name. Those pages cannot be rendered until collectstatic has written the
# manifest of names. STATIC_FROM_APPS=1 (the tests: agentserver/test_settings.py) needs no
# collectstatic: the files are served from the apps' own static/ folders, under plain names.
STATIC_URL = "static/"
STATIC_ROOT: Path | None = Path(env.str("STATIC_ROOT", default=str(BASE_DIR / "staticfiles")))
STATIC_FROM_APPS = env.bool("STATIC_FROM_APPS", default=False)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if STATIC_FROM_APPS
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = STATIC_FROM_APPS

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # httpx logs every request's URL at INFO; push URLs may carry the receiver's secrets.
    "loggers": {"django.request": {"level": "ERROR"}, "httpx": {"level": "WARNING"}},
}
