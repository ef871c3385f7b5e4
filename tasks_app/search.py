"""The search of tasks by a term, as the admin's task list and the tenant API (tenant_api)
offer it: by task id, context id or message id exactly, or by the words of the messages."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connection
from django.db.models import Q
from django.db.models.expressions import RawSQL

from .models import MESSAGE_TSVECTOR, Message, Task

# A text search reads at most this many matching messages (of any task, in no order).
TEXT_MATCHES = 1000
_T, _M = Task._meta.db_table, Message._meta.db_table


def matching_task_ids(term: str, vendor: str, tenant_ids: list[int] | None = None) -> Q:
    """The tasks a search term finds: by task id (a UUID), context id or message id, exactly,
    or (a term that is no UUID) by the words of a message's text parts. With `tenant_ids`
    (a member's), the text search reads only those tenants' messages."""
    task_id = _as_uuid(term)
    if vendor != "postgresql":
        # SQLite (the embedded mode, a small store): a plain substring match will do.
        found = Q(context_id=term) | Q(pk__in=Message.objects.filter(message_id=term).values("task_id"))
        if task_id is not None:
            return found | Q(pk=task_id)
        return found | Q(pk__in=Message.objects.filter(parts__icontains=term).values("task_id"))
    # One UNION: each branch runs on its own index (an OR of the branches in the list's
    # query would read the whole task table). It runs once, here, and the page and its count
    # then read the tasks it found by key: a text search costs once, not twice.
    branches = [f"SELECT id FROM {_T} WHERE context_id = %s", f"SELECT task_id FROM {_M} WHERE message_id = %s"]
    params: list[Any] = [term, term]
    if task_id is not None:
        branches.append(f"SELECT id FROM {_T} WHERE id = %s")
        params.append(task_id)
    else:
        words = f"{MESSAGE_TSVECTOR} @@ plainto_tsquery('simple', %s)"
        params.append(term)
        if tenant_ids is None:
            branches.append(f"(SELECT task_id FROM {_M} WHERE {words} LIMIT {TEXT_MATCHES})")
        else:
            branches.append(
                f"(SELECT m.task_id FROM {_M} m JOIN {_T} t ON t.id = m.task_id "
                f"WHERE {words} AND t.tenant_id = ANY(%s) LIMIT {TEXT_MATCHES})"
            )
            params.append(tenant_ids)
    with connection.cursor() as cursor:
        cursor.execute(" UNION ".join(branches), params)
        ids = [row[0] for row in cursor.fetchall()]
    # As a set to join, not a list to test each row against: given `id IN (<list>)`, the
    # planner walks the whole list index in order hoping for an early page (110 ms for a
    # thousand tasks of a million); from the set it reads them by key and sorts (1-8 ms).
    return Q(pk__in=RawSQL("SELECT unnest(%s::uuid[])", [ids]))


def _as_uuid(term: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(term)
    except ValueError:
        return None
