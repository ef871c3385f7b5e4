"""Seed a database with many tasks for the admin benchmark (bench/admin_bench.py).

    .venv/bin/python bench/admin_seed.py                 # one million tasks
    .venv/bin/python bench/admin_seed.py --tasks 200000  # fewer
    ADMIN_BENCH_DB=postgres://postgres@127.0.0.1:5432/other .venv/bin/python bench/admin_seed.py

The database (default `agentserver_admin_bench` on the server of DATABASE_URL, or
127.0.0.1) is created if missing, migrated, and its tasks replaced. Everything is written
by set-based SQL (INSERT ... SELECT generate_series) with the secondary indexes of the task
tables dropped meanwhile and built again at the end, then ANALYZE.

The mix: 3 tenants, 20 agents (spread over them), 3,000 contexts; states mostly completed,
then failed, input-required, working, canceled, submitted, rejected; each task 1-4
messages with a text part of common words and one rarer word (`w<n>`: ~125 messages each);
about a third of the tasks with an artifact; a few tasks with thousands of events; and a
superuser `bench` (password `bench`) for the benchmark's Client.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DB = "agentserver_admin_bench"
TENANTS = ("acme", "globex", "initech")
AGENTS = 20
CONTEXTS = 3000
BIG_TASKS = 5  # tasks with many events
BIG_EVENTS = 3000
CHUNK = 250_000
WORDS = (
    "report summary invoice order shipment weather forecast translate document contract review "
    "draft email meeting agenda budget quarter revenue customer support ticket refund delivery "
    "schedule flight hotel booking travel itinerary analysis chart table dataset model training "
    "deploy server error log incident outage latency database query index backup restore "
    "password account login profile settings update request approve reject escalate assign "
    "project milestone release feature bug fix test review merge branch commit build pipeline"
).split()
# state, share of the tasks (per mille)
STATES = (
    ("completed", 700),
    ("failed", 80),
    ("input-required", 60),
    ("working", 50),
    ("canceled", 50),
    ("submitted", 40),
    ("rejected", 20),
)


def bench_database_url() -> str:
    if url := os.environ.get("ADMIN_BENCH_DB"):
        return url
    base = urlsplit(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/agentserver"))
    return urlunsplit(base._replace(path=f"/{DEFAULT_DB}"))


def setup_django(url: str) -> None:
    """Django on the benchmark's database (before django.setup, so the settings read it)."""
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentserver.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def database_ensure(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
            print(f"created database {name}")


def _state_case(share_of: str) -> str:
    """A CASE choosing a state by `share_of` (0..999) in the proportions of STATES."""
    whens, upto = [], 0
    for state, share in STATES:
        upto += share
        whens.append(f"WHEN {share_of} < {upto} THEN '{state}'")
    return "CASE " + " ".join(whens) + " ELSE 'completed' END"


def seed(tasks: int) -> None:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from accounts.services import agent_ensure, tenant_ensure
    from tasks_app.models import Artifact, Message, StatusChange, Task, TaskEvent

    started = time.monotonic()

    def step(what: str) -> None:
        print(f"{time.monotonic() - started:7.1f}s  {what}", flush=True)

    call_command("migrate", verbosity=0)
    step("migrated")
    agent_ids = []
    tenant_ids = []
    for n in range(AGENTS):
        tenant = tenant_ensure(slug=TENANTS[n % len(TENANTS)], name=TENANTS[n % len(TENANTS)].title())
        agent = agent_ensure(
            tenant=tenant,
            slug=f"agent-{n:02d}",
            defaults={"name": f"Agent {n}", "description": "a benchmark agent", "executor": "echo"},
        )
        agent_ids.append(agent.pk)
        tenant_ids.append(tenant.pk)
    user_model = get_user_model()
    if not user_model.objects.filter(username="bench").exists():
        user_model.objects.create_superuser("bench", "bench@example.com", "bench")

    T, M, SC, A, E = (m._meta.db_table for m in (Task, Message, StatusChange, Artifact, TaskEvent))
    tables = (T, M, SC, A, E)
    with connection.cursor() as cur:
        cur.execute("SET synchronous_commit = off")
        cur.execute("SET maintenance_work_mem = '512MB'")
        cur.execute(f"TRUNCATE {', '.join(tables)} CASCADE")
        # Every index but the keys and unique constraints goes while the rows go in.
        cur.execute(
            """
            SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
            FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
            WHERE c.relname = ANY(%s) AND NOT i.indisprimary AND NOT i.indisunique
            """,
            [list(tables)],
        )
        found = cur.fetchall()
        # Kept in a table of the benchmark's database until they are built again, so that a
        # run stopped half-way leaves them to the next run to build (not lost).
        cur.execute("CREATE TABLE IF NOT EXISTS bench_dropped_indexes (name text PRIMARY KEY, definition text)")
        for name, definition in found:
            cur.execute(
                "INSERT INTO bench_dropped_indexes VALUES (%s, %s) ON CONFLICT (name) DO NOTHING", [name, definition]
            )
            cur.execute(f"DROP INDEX {name}")
        cur.execute("SELECT name, definition FROM bench_dropped_indexes")
        indexes = cur.fetchall()
        step(f"truncated; {len(indexes)} indexes dropped")

        agents = "ARRAY[" + ",".join(map(str, agent_ids)) + "]"
        tenants = "ARRAY[" + ",".join(map(str, tenant_ids)) + "]"
        words = "ARRAY[" + ",".join(f"'{w}'" for w in WORDS) + "]"
        # Each task's numbers come from hashes of its ordinal: reproducible, spread evenly.
        h = "('x' || substr(md5(i::text || '{salt}'), 1, 8))::bit(32)::int & 2147483647"
        for first in range(1, tasks + 1, CHUNK):
            last = min(first + CHUNK - 1, tasks)
            cur.execute(
                f"""
                INSERT INTO {T} (id, tenant_id, agent_id, owner, client_task_id, context_id, dialect, state,
                    status_message_id, status_timestamp, reply_only, failure, last_seq, has_push_configs,
                    metadata, accepted_output_modes, run_token, run_requested_at, run_claimed_at, run_retries,
                    message_count, artifact_count, created_at, updated_at)
                SELECT md5(i::text || 'task')::uuid,
                       ({tenants})[1 + i % {AGENTS}], ({agents})[1 + i % {AGENTS}],
                       'user-' || ({h.format(salt="owner")}) % 50, NULL,
                       'ctx-' || ({h.format(salt="ctx")}) % {CONTEXTS}, 'a2a/1.0',
                       {_state_case(f"({h.format(salt='state')}) % 1000")},
                       NULL, created + make_interval(secs => ({h.format(salt="dur")}) % 600), false, '',
                       1, false, '{{}}', '[]', NULL, NULL, NULL, 0,
                       1 + ({h.format(salt="msgs")}) % 4, CASE WHEN i % 3 = 0 THEN 1 ELSE 0 END,
                       created, created
                FROM (SELECT i, now() - make_interval(secs => ({tasks} - i) * 30.0) AS created
                      FROM generate_series({first}, {last}) AS i) AS g
                """,
            )
            cur.execute(
                f"""
                INSERT INTO {M} (task_id, message_id, context_id, role, parts, metadata, extensions,
                    reference_task_ids, command, command_params, created_at)
                SELECT t.id, 'msg-' || g.i || '-' || j, t.context_id,
                       CASE WHEN j % 2 = 1 THEN 'user' ELSE 'agent' END,
                       jsonb_build_array(jsonb_build_object('type', 'text', 'text',
                           array_to_string(ARRAY(
                               SELECT ({words})[1 + (('x' || substr(md5(g.i::text || j || k), 1, 8))::bit(32)::int
                                                     & 2147483647) % {len(WORDS)}]
                               FROM generate_series(1, 6) AS k), ' ')
                           || ' w' || ((g.i * 7 + j) % ({max(tasks // 50, 1)})))),
                       '{{}}', '[]', '[]', '', NULL, t.created_at + make_interval(secs => j)
                FROM generate_series({first}, {last}) AS g(i)
                JOIN {T} t ON t.id = md5(g.i::text || 'task')::uuid,
                     generate_series(1, t.message_count) AS j
                """,
            )
            cur.execute(
                f"""
                INSERT INTO {A} (task_id, artifact_id, name, description, parts, metadata, extensions, complete,
                    created_at, updated_at)
                SELECT t.id, 'artifact-' || g.i, 'result', '',
                       '[{{"type": "text", "text": "the result"}}]', '{{}}', '[]', true,
                       t.status_timestamp, t.status_timestamp
                FROM generate_series({first}, {last}) AS g(i)
                JOIN {T} t ON t.id = md5(g.i::text || 'task')::uuid
                WHERE t.artifact_count = 1
                """,
            )
            cur.execute(
                f"""
                INSERT INTO {SC} (task_id, state, message_id, reason, timestamp)
                SELECT t.id, t.state, NULL, '', t.status_timestamp
                FROM generate_series({first}, {last}) AS g(i)
                JOIN {T} t ON t.id = md5(g.i::text || 'task')::uuid
                """,
            )
            cur.execute(
                f"""
                INSERT INTO {E} (task_id, seq, kind, payload, created_at)
                SELECT t.id, 1, 'status', jsonb_build_object('state', t.state), t.status_timestamp
                FROM generate_series({first}, {last}) AS g(i)
                JOIN {T} t ON t.id = md5(g.i::text || 'task')::uuid
                """,
            )
            step(f"tasks {first}..{last}")
        # A few tasks with a long event log (a long stream of artifact chunks).
        cur.execute(
            f"""
            WITH big AS (SELECT id FROM {T} ORDER BY status_timestamp DESC LIMIT {BIG_TASKS})
            INSERT INTO {E} (task_id, seq, kind, payload, created_at)
            SELECT big.id, s, 'artifact', jsonb_build_object('chunk', s), now()
            FROM big, generate_series(2, {BIG_EVENTS}) AS s
            """
        )
        cur.execute(
            f"UPDATE {T} SET last_seq = {BIG_EVENTS} WHERE id IN "
            f"(SELECT id FROM {T} ORDER BY status_timestamp DESC LIMIT {BIG_TASKS})"
        )
        step(f"{BIG_TASKS} tasks with {BIG_EVENTS} events")
        for name, definition in indexes:
            cur.execute(definition)
            cur.execute("DELETE FROM bench_dropped_indexes WHERE name = %s", [name])
            step(f"index {name}")
        for table in tables:
            cur.execute(f"VACUUM ANALYZE {table}")
        step("vacuumed and analysed")
        cur.execute(f"SELECT count(*) FROM {T}")
        print(f"{cur.fetchone()[0]:,} tasks in {connection.settings_dict['NAME']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1_000_000)
    args = parser.parse_args()
    url = bench_database_url()
    database_ensure(url)
    setup_django(url)
    seed(args.tasks)


if __name__ == "__main__":
    main()
