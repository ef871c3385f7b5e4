"""The hot path's statements, in SQL, for Postgres.

Why raw SQL here: a blocking SendMessage used to cost ~11 transactions and ~20 statements,
and through the ORM each statement costs ~1.5 ms of CPU on a small machine (compiling the
query, model instances, the round trip) where a prepared raw statement costs ~0.2 ms. Each
statement below does one whole step in a single round trip, using data-modifying CTEs: a
single statement is its own transaction in autocommit, runs in the caller's transaction when
there is one, and still goes through Django's cursor (query counting, the connection pool).

The rules of `services` hold in every statement: the UPDATE of the task row takes its row
lock, checks the state (from `lifecycle.ALLOWED`) and the run token in its WHERE clause, and
allocates the event's `seq` as `last_seq + 1` under that lock; the inserts of the same
statement read the updated row, so they happen only if the guard passed. When a guard fails
no row comes back, and the caller falls back to the ORM path, which locks the row and raises
the precise error (or, if the task moved on meanwhile, does the write).

Only `services` and `selectors` use this module; SQLite (the embedded mode) never does.
Table and column names come from the models, never from input; every value is a parameter.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any, TypeVar

import orjson
import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connection, connections, models

from accounts.models import Agent, Tenant

from .domain import ArtifactView, MessageView
from .models import ActiveTaskCount, Artifact, Message, StatusChange, Task, TaskEvent, TenantStorage


@functools.cache
def _on_postgres() -> bool:
    return connections[DEFAULT_DB_ALIAS].vendor == "postgresql"


def available() -> bool:
    """True when the statements here can run (Postgres); SQLite takes the ORM path. The
    database of a process does not change: asked once (through Django's connection proxy the
    question cost 1.4 % of the web process's CPU under load, profiled)."""
    return _on_postgres()


def dumps(value: Any) -> str | None:
    """A JSON parameter for a `%s::jsonb` placeholder (None stays SQL NULL). Values have
    passed `storable.check`, so orjson can write them; what it cannot write is not stored."""
    if value is None:
        return None
    return orjson.dumps(value).decode()


def text_array(values: Sequence[str]) -> str:
    """A list of states as one `%s::text[]` parameter: psycopg's array dumper costs more
    than the rest of a statement's parameters together. States are plain identifiers."""
    return "{" + ",".join(values) + "}"


def loads(value: Any) -> Any:
    """A jsonb column's value (Django's psycopg setup hands jsonb over as text)."""
    return orjson.loads(value) if isinstance(value, (str, bytes)) else value


class _PreparedCursor(psycopg.RawCursor):
    """Binds on the server and prepares every statement on first use.

    The statements here are long CTEs: parsing and planning one costs Postgres about as
    much as running it (0.45 of 1.05 ms CPU for NEW_TASK, measured). Django leaves
    preparation off for the whole connection (`prepare_threshold=None`, for the sake of
    transaction poolers) and binds on the client; these few fixed statements opt in, so
    each backend plans each of them once. Their texts never change while a process runs
    (the columns come from the models), so a prepared plan cannot go stale under them.

    A raw cursor, with the statement already in `$n` form (`_positional`): psycopg caches the
    conversion of `%(name)s` placeholders only for statements under 4 KiB with at most 50
    parameters, and NEW_TASK is neither, so it split the text again on every send (~0.2 ms
    of the web process's CPU per request, profiled).
    """

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True, binary=binary)


_NAMED = re.compile(r"%\((\w+)\)s")


@functools.cache
def _positional(statement: str) -> tuple[str, tuple[str, ...]]:
    """`statement` with each `%(name)s` as `$n` (one n per name), and the names in n's order."""
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${names.setdefault(match[1], len(names) + 1)}"

    return _NAMED.sub(number, statement), tuple(names)


def execute(statement: str, params: dict[str, Any]) -> list[tuple]:
    """Run one statement on a prepared, server-bound psycopg cursor, with Django's error
    wrapping and its guard against a broken transaction.

    The connection keeps its cursor: a new psycopg cursor and Django's wrapper around it cost
    ~35 us of Python per statement (measured in process), and a run or a blocking send makes
    four. Where Django records or wraps queries (`assertNumQueries`, DEBUG, an
    `execute_wrapper`) the statement goes through Django's wrapper, so it is counted as ever."""
    text, names = _positional(statement)
    values = [params[name] for name in names]
    connection.ensure_connection()
    if connection.queries_logged or connection.execute_wrappers:
        with connection.wrap_database_errors:
            wrapped = connection._prepare_cursor(_PreparedCursor(connection.connection))  # type: ignore[attr-defined]
        with wrapped as cursor:
            cursor.execute(text, values)
            return cursor.fetchall()  # every statement here returns rows
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        cursor = _kept_cursor()
        cursor.execute(text, values)
        return cursor.fetchall()


def _kept_cursor() -> _PreparedCursor:
    """This thread's connection's cursor, made again when Django's connection wrapper holds
    another psycopg connection (a pool hands out several over time)."""
    raw = connection.connection
    kept: tuple[Any, _PreparedCursor] | None = getattr(connection, "_agentserver_cursor", None)
    if kept is None or kept[0] is not raw or kept[1].closed:
        kept = (raw, _PreparedCursor(raw))
        connection._agentserver_cursor = kept  # type: ignore[attr-defined]
    return kept[1]


# --- Tasks as rows ----------------------------------------------------------------------

_TASK_FIELDS = Task._meta.concrete_fields
_TASK_ATTNAMES = [f.attname for f in _TASK_FIELDS]
_TASK_JSON = [i for i, f in enumerate(_TASK_FIELDS) if isinstance(f, models.JSONField)]
TASK_COLUMNS = ", ".join(str(f.column) for f in _TASK_FIELDS)


def _columns(prefix: str) -> str:
    return ", ".join(f"{prefix}.{f.column}" for f in _TASK_FIELDS)


def task_from_row(row: Sequence[Any]) -> Task:
    """A Task instance from the columns of TASK_COLUMNS (Django hands jsonb over as text)."""
    values = list(row[: len(_TASK_FIELDS)])
    for i in _TASK_JSON:
        values[i] = loads(values[i])
    return Task.from_db(DEFAULT_DB_ALIAS, _TASK_ATTNAMES, values)


T, M, SC, A, E = (m._meta.db_table for m in (Task, Message, StatusChange, Artifact, TaskEvent))
STORED = TenantStorage._meta.db_table
COUNTS = ActiveTaskCount._meta.db_table
AGENT = Agent._meta.db_table
TENANT = Tenant._meta.db_table

# --- Writes -----------------------------------------------------------------------------


_Model = TypeVar("_Model", bound=models.Model)


class _Insert:
    """A model's columns for a generated INSERT, and an instance's values as its parameters:
    every concrete field is written (a field added to the model is written too), except a key
    the database makes and the columns named in `given` (the statement supplies those)."""

    def __init__(self, model: type[models.Model], prefix: str, *, given: Sequence[str] = ()) -> None:
        fields = [
            f
            for f in model._meta.concrete_fields
            if f.column not in given and not (f.primary_key and isinstance(f, models.AutoField))
        ]
        self.columns = ", ".join(str(f.column) for f in fields)
        self.values = ", ".join(
            f"%({prefix}{f.attname})s" + ("::jsonb" if isinstance(f, models.JSONField) else "") for f in fields
        )
        self._params = [(f"{prefix}{f.attname}", f.attname, isinstance(f, models.JSONField)) for f in fields]
        self._fields = fields

    def params(self, instance: models.Model) -> dict[str, Any]:
        return {
            name: dumps(getattr(instance, attname)) if json else getattr(instance, attname)
            for name, attname, json in self._params
        }

    def params_of(self, values: dict[str, Any]) -> dict[str, Any]:
        """The same for the instance `made(model, values)` would be, without making it."""
        params = {}
        for (name, attname, json), field in zip(self._params, self._fields, strict=True):
            value = values[attname] if attname in values else field.get_default()
            params[name] = dumps(value) if json else value
        return params


def made(model: type[_Model], values: dict[str, Any]) -> _Model:
    """An unsaved instance with `values` (by attname) and every other field's default, as
    `model(**values)` makes it, but through Django's positional fast path: a Task in 14 us
    instead of 28 (measured), and a send makes two."""
    return model(*[values[f.attname] if f.attname in values else f.get_default() for f in model._meta.concrete_fields])


def _every_column(model: type[models.Model], values: dict[str, str], *, key: bool = False) -> tuple[str, str]:
    """An INSERT's column list and values, written as SQL per column, that must name every column
    of `model` (its key too, with `key`): a column added to the model and not here stops the
    import, so no statement can leave a field to a default the ORM would have set."""
    columns = [str(f.column) for f in model._meta.concrete_fields if key or not isinstance(f, models.AutoField)]
    if missing := set(columns) ^ set(values):
        raise ImproperlyConfigured(f"an INSERT of {model.__name__} must name exactly its columns; differs in {missing}")
    return ", ".join(columns), ", ".join(values[column] for column in columns)


_NEW_TASK = _Insert(Task, "t_")
_NEW_MESSAGE = _Insert(Message, "m_", given=("task_id",))
_NEW_STATUS = _Insert(StatusChange, "s_", given=("task_id",))
_NEW_EVENT = _Insert(TaskEvent, "e_", given=("task_id",))

# A new task: the task row, the user's message, the status change and event seq=1, all in
# one statement, each row exactly as the ORM would write its instance (`new_task_params`);
# nothing is read back but the message's id. The tenant's caps are checked in the same
# statement (0: no cap): the task is inserted only while the tenant has fewer than
# `max_active` active tasks, its anonymous caller (`max_anonymous`, for an anonymous caller's
# task only) fewer than that share, and it has stored less than `max_stored` bytes; when it is
# not, nothing is written and the message's id comes back NULL, with the counts saying why.
# The active counts are the sums of the tenant's rows of ActiveTaskCount (at most SLOTS, read
# by one index), which a trigger keeps in step with the tasks.
# Concurrent sends read the count before each other's insert commits, so under a burst the
# cap can be passed by the number of sends in flight at once.
_ROOM = f"""
    SELECT coalesce(sum(c.active), 0) AS active, coalesce(sum(c.anonymous), 0) AS anonymous,
           (SELECT stored_bytes FROM {STORED} WHERE tenant_id = %(t_tenant_id)s) AS stored
    FROM {COUNTS} c WHERE c.tenant_id = %(t_tenant_id)s
"""
# The same counts alone (a follow-up checks them in its transaction): one query for all caps.
ROOM = _ROOM
NEW_TASK = f"""
WITH room AS ({_ROOM}), task AS (
    INSERT INTO {T} ({_NEW_TASK.columns}) SELECT {_NEW_TASK.values} FROM room
    WHERE (%(max_active)s::bigint = 0 OR room.active < %(max_active)s::bigint)
      AND (%(max_anonymous)s::bigint = 0 OR room.anonymous < %(max_anonymous)s::bigint)
      AND (%(max_stored)s::bigint = 0 OR room.stored IS NULL OR room.stored < %(max_stored)s::bigint)
    RETURNING id
), message AS (
    INSERT INTO {M} (task_id, {_NEW_MESSAGE.columns}) SELECT id, {_NEW_MESSAGE.values} FROM task
    RETURNING id
), status AS (
    INSERT INTO {SC} (task_id, {_NEW_STATUS.columns}) SELECT id, {_NEW_STATUS.values} FROM task
), event AS (
    INSERT INTO {E} (task_id, {_NEW_EVENT.columns}) SELECT id, {_NEW_EVENT.values} FROM task
)
SELECT (SELECT id FROM message), room.active, room.stored, room.anonymous FROM room
"""


def new_task_params(
    task: Task,
    message: Message,
    status: dict[str, Any],
    event: dict[str, Any],
    *,
    max_active: int,
    max_stored: int,
    max_anonymous: int = 0,
) -> dict[str, Any]:
    """NEW_TASK's parameters: the two unsaved instances' fields, the status change's and the
    event's (by attname, as `made` takes them), and the tenant's caps."""
    return {
        "max_active": max_active,
        "max_anonymous": max_anonymous,
        "max_stored": max_stored,
        **_NEW_TASK.params(task),
        **_NEW_MESSAGE.params(message),
        **_NEW_STATUS.params_of(status),
        **_NEW_EVENT.params_of(event),
    }


# The guard every write on behalf of a run shares: the task exists, may move as asked, and
# (when the caller names one) is still on the caller's run.
_RUN_GUARD = """
    WHERE id = %(task_id)s AND state = ANY(%(from_states)s::text[])
      AND (%(run_token)s::uuid IS NULL OR run_token = %(run_token)s::uuid)
"""

# What a run write reports back: what the after-commit hook needs, not the whole row (decoding
# five timestamps and two JSON columns cost the worker more than the statement's own round trip).
WRITTEN_COLUMNS = ("id", "state", "last_seq", "has_push_configs")
# What the updated row hands the rest of a run write (its inserts read these) and the caller.
_WRITE_RETURNING = ", ".join((*WRITTEN_COLUMNS, "status_message_id", "context_id"))


# The rows a run write inserts, column by column, from the updated task row (`task`) and the
# parameters.
_ARTIFACT_INSERT = _every_column(
    Artifact,
    {
        "task_id": "id",
        "artifact_id": "%(artifact_id)s",
        "name": "%(name)s",
        "description": "%(description)s",
        "parts": "%(artifact_parts)s::jsonb",
        "metadata": "%(artifact_metadata)s::jsonb",
        "extensions": "'[]'",
        "complete": "%(complete)s",
        "created_at": "%(now)s",
        "updated_at": "%(now)s",
    },
)
_AGENT_MESSAGE_INSERT = _every_column(
    Message,
    {
        "id": "status_message_id",
        "task_id": "id",
        "message_id": "%(message_id)s",
        "context_id": "context_id",
        "role": "%(role)s",
        "parts": "%(parts)s::jsonb",
        "metadata": "%(message_metadata)s::jsonb",
        "extensions": "'[]'",
        "reference_task_ids": "'[]'",
        "activated_extensions": "'[]'",
        "command": "''",
        "command_params": "NULL",
        "sent_at": "NULL",
        "sender_id": "''",
        "created_at": "%(now)s",
    },
    key=True,
)
_STATUS_INSERT = _every_column(
    StatusChange,
    {
        "task_id": "id",
        "state": "state",
        "message_id": "status_message_id",
        "reason": "%(reason)s",
        "timestamp": "%(now)s",
    },
)


def run_write(*, move: bool, message: bool = False, artifact: str | None = None) -> str:
    """One write on behalf of a run, as one statement: a state change (`move`, with the agent
    `message` as its status message or none), an artifact (`artifact` = "replace" for a
    whole one, "append" for a chunk added to the one stored), or the artifact and then the
    state change, as two events of one transaction.

    Parameters: the guard's; `now`; for a move `state`, `failure`, `reason`, `kind`,
    `payload` (and `message_id`, `role`, `parts`, `message_metadata` with a message); for
    an artifact `artifact_id`, `name`, `description`, `artifact_parts`, `artifact_metadata`,
    `complete`, `artifact_kind`, `artifact_payload`.
    """
    events = int(move) + int(artifact is not None)
    ctes, sets = [], [f"last_seq = last_seq + {events}", "updated_at = %(now)s"]
    if move and message:
        # The message's id is drawn first so that the task row can point at it.
        ctes.append(f"new_message AS MATERIALIZED (SELECT nextval(pg_get_serial_sequence('{M}', 'id')) AS id)")
        sets.append("message_count = message_count + 1")
    if artifact is not None:
        # The task's count of artifacts grows when this one is new: the subquery reads the
        # artifacts as they were when the statement began (the INSERT below is not seen).
        # A run writes its task's artifacts one after another; two statements racing to make
        # the same new artifact of one task would both count it (the admin's figure only).
        sets.append(
            f"artifact_count = artifact_count + (NOT EXISTS (SELECT 1 FROM {A} a "
            "WHERE a.task_id = %(task_id)s AND a.artifact_id = %(artifact_id)s))::int"
        )
    if move:
        status_message = "(SELECT id FROM new_message)" if message else "NULL"
        sets[:0] = [
            "state = %(state)s",
            f"status_message_id = {status_message}",
            "status_timestamp = %(now)s",
            "failure = %(failure)s",
        ]
    ctes.append(f"task AS (UPDATE {T} SET {', '.join(sets)} {_RUN_GUARD} RETURNING {_WRITE_RETURNING})")
    if artifact is not None:
        ctes.append(f"""artifact AS (
    INSERT INTO {A} ({_ARTIFACT_INSERT[0]})
    SELECT {_ARTIFACT_INSERT[1]}
    FROM task
    ON CONFLICT (task_id, artifact_id) DO UPDATE SET {_ON_CONFLICT[artifact]}
    RETURNING id, name, description
)""")
        # The event names the artifact as stored: a chunk keeps the name of its first chunk;
        # and its place among the task's artifacts, the ones made before it (A2A 0.1's `index`).
        # It comes before the state change's event, if any.
        columns, values = _every_column(
            TaskEvent,
            {
                "task_id": "task.id",
                "seq": f"task.last_seq - {events - 1}",
                "kind": "%(artifact_kind)s",
                "payload": "jsonb_set(jsonb_set(jsonb_set(%(artifact_payload)s::jsonb, "
                "'{artifact,name}', to_jsonb(artifact.name)), "
                "'{artifact,description}', to_jsonb(artifact.description)), "
                f"'{{index}}', to_jsonb((SELECT count(*) FROM {A} prior "
                "WHERE prior.task_id = task.id AND prior.id < artifact.id)))",
                "created_at": "%(now)s",
            },
        )
        ctes.append(f"""artifact_event AS (
    INSERT INTO {E} ({columns})
    SELECT {values}
    FROM task, artifact
)""")
    if move and message:
        ctes.append(f"""message AS (
    INSERT INTO {M} ({_AGENT_MESSAGE_INSERT[0]})
    SELECT {_AGENT_MESSAGE_INSERT[1]}
    FROM task
)""")
    if move:
        # The payload is complete but for the message's context, which only the row knows.
        payload = (
            "jsonb_set(%(payload)s::jsonb, '{message,context_id}', to_jsonb(context_id))"
            if message
            else "%(payload)s::jsonb"
        )
        event_columns, event_values = _every_column(
            TaskEvent,
            {
                "task_id": "id",
                "seq": "last_seq",
                "kind": "%(kind)s",
                "payload": payload,
                "created_at": "%(now)s",
            },
        )
        ctes.append(f"""status AS (
    INSERT INTO {SC} ({_STATUS_INSERT[0]})
    SELECT {_STATUS_INSERT[1]} FROM task
), event AS (
    INSERT INTO {E} ({event_columns})
    SELECT {event_values} FROM task
)""")
    return "WITH " + ",\n".join(ctes) + f"\nSELECT {', '.join(WRITTEN_COLUMNS)} FROM task"


# A whole artifact (re)placed; or a chunk appended to the parts of the one stored.
_ON_CONFLICT = {
    "replace": "name = EXCLUDED.name, description = EXCLUDED.description, parts = EXCLUDED.parts, "
    "metadata = EXCLUDED.metadata, complete = EXCLUDED.complete, updated_at = EXCLUDED.updated_at",
    "append": f"parts = {A}.parts || EXCLUDED.parts, complete = EXCLUDED.complete, updated_at = EXCLUDED.updated_at",
}

RUN_WRITES = {
    (move, message, artifact): run_write(move=move, message=message, artifact=artifact)
    for move in (False, True)
    for message in (False, True)
    for artifact in (None, "replace", "append")
    if (move or not message) and (move or artifact)
}

# --- Reads ------------------------------------------------------------------------------

# Postgres builds the JSON of a task's messages and artifacts; Python parses it once.
_MESSAGE_JSON = """json_build_object(
    'message_id', {m}.message_id, 'role', {m}.role, 'parts', {m}.parts, 'context_id', {m}.context_id,
    'task_id', {m}.task_id, 'metadata', {m}.metadata, 'extensions', {m}.extensions,
    'reference_task_ids', {m}.reference_task_ids)"""
_HISTORY = f"""(SELECT coalesce(json_agg({_MESSAGE_JSON.format(m="h")} ORDER BY h.id), '[]')::text
     FROM {M} h WHERE h.task_id = {{task}}.id)"""
_ARTIFACTS = f"""(SELECT coalesce(json_agg(json_build_object(
        'artifact_id', a.artifact_id, 'name', a.name, 'description', a.description, 'parts', a.parts,
        'metadata', a.metadata, 'extensions', a.extensions) ORDER BY a.id), '[]')::text
     FROM {A} a WHERE a.task_id = t.id)"""

# The claim of a run (compare-and-set on the token, as `run_claim`) and what its executor
# needs (as `run_inputs`), in one statement.
# The row is found by its key only: a plan that walked a partial index of runs instead, made
# while it was small (a prepared statement keeps its plan for the connection's life), read
# 1,700 index entries per claim under a backlog of 2,000 runs (measured, when such an index's
# condition was `run_claimed_at IS NULL`). `num_nulls` matches no index's condition. The claim
# writes run_claimed_at and run_holder alone, which no index holds: a HOT update (migration 0018).
RUN_START = f"""
WITH claimed AS (
    UPDATE {T} SET run_claimed_at = %(now)s, run_holder = %(holder)s
    WHERE id = %(task_id)s AND run_token = %(run_token)s AND num_nulls(run_claimed_at) = 1
      AND state <> ALL(%(terminal)s::text[])
    RETURNING id, agent_id, context_id, accepted_output_modes, run_token, executor_state, dialect,
              input_timeout, completion_timeout, products_max_bytes, state
)
SELECT claimed.id, claimed.context_id, claimed.accepted_output_modes, claimed.run_token,
       agent.executor, agent.settings, {_HISTORY.format(task="claimed")},
       agent.secret_sealed, claimed.executor_state, agent.extensions,
       (SELECT um.activated_extensions FROM {M} um WHERE um.task_id = claimed.id AND um.role = 'user'
        ORDER BY um.id DESC LIMIT 1),
       claimed.dialect, claimed.input_timeout, claimed.completion_timeout, claimed.products_max_bytes,
       claimed.state, tenant.slug || '/' || agent.slug
FROM claimed JOIN {AGENT} agent ON agent.id = claimed.agent_id JOIN {TENANT} tenant ON tenant.id = agent.tenant_id
"""


def task_read(*, for_caller: bool, history: bool, artifacts: bool) -> str:
    """One task with its status message, its history and its artifacts, in one query."""
    return f"""
SELECT {_columns("t")},
       CASE WHEN sm.id IS NOT NULL THEN {_MESSAGE_JSON.format(m="sm")}::text END,
       {_HISTORY.format(task="t") if history else "'[]'"},
       {_ARTIFACTS if artifacts else "'[]'"}
FROM {T} t LEFT JOIN {M} sm ON sm.id = t.status_message_id
WHERE {_FOR_CALLER if for_caller else "t.id = %(task_id)s"}
"""


# The caller's task by its key or by the id its client chose (selectors.caller_task_q): each
# arm on an index of its own (the key; agent, owner and client id). The agent and the owner are
# checked on the row found, never looked up: `tasks_task_list` and `tasks_task_list_ctx` begin
# with them, and a plan made while the table was small (a prepared statement keeps it) would walk
# all of the caller's tasks to find one: 4,300 index entries per GetTask after a run of 10,000
# tasks (measured). `+ 0` and `|| ''` keep those columns out of every index condition.
_FOR_CALLER = """(t.id = %(task_id)s::uuid OR t.client_task_id = %(client_id)s)
  AND t.agent_id + 0 = %(agent_id)s AND t.owner || '' = %(owner)s"""


TASK_READS = {
    (c, h, a): task_read(for_caller=c, history=h, artifacts=a)
    for c in (False, True)
    for h in (False, True)
    for a in (False, True)
}


def messages_from_json(text: str) -> list[MessageView]:
    return [MessageView(**m) for m in orjson.loads(text)]


def artifacts_from_json(text: str) -> list[ArtifactView]:
    return [ArtifactView(**a) for a in orjson.loads(text)]


# A stream's read of its task's log, at every hint and every heartbeat (the fallback for a lost
# hint): 10,000 idle streams read 700 times a second, and through the ORM the read's query
# building was a third of each heartbeat's CPU (bench/README.md, streams at scale).
EVENTS_AFTER = f"""
SELECT seq, kind, payload FROM {E} WHERE task_id = %(task_id)s::uuid AND seq > %(seq)s ORDER BY seq LIMIT %(limit)s
"""
