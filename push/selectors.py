"""Every read of push. A caller sees only the configs of its own tasks; another caller's
task, or a config of another task, is indistinguishable from one that does not exist."""

from __future__ import annotations

import base64
import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from accounts.models import Agent
from accounts.sealing import Unsealable, unseal
from accounts.selectors import Principal
from tasks_app.errors import InvalidParams, TaskNotFound
from tasks_app.models import Task
from tasks_app.selectors import display_id, task_for_caller

from .domain import REDACTED, PushConfigView
from .models import PendingPushConfig, PushConfig

log = logging.getLogger(__name__)


def _task_for_caller(*, agent: Agent, principal: Principal, task_id: str) -> Task:
    task = task_for_caller(agent=agent, principal=principal, task_id=task_id)
    if task is None:
        raise TaskNotFound(f"task {task_id!r} not found")
    return task


def config_view(config: PushConfig, *, task: Task | None = None) -> PushConfigView:
    """The config as its owner reads it; `task` (its task, when the caller holds it) names the
    task by the id it is shown by (the client's own for an A2A 0.1 task)."""
    return PushConfigView(
        config_id=config.config_id,
        task_id=display_id(task) if task is not None else str(config.task_id),
        url=config.url,
        token=_unsealed_or_blank(config, config.token_sealed, "token"),
        auth_scheme=config.auth_scheme,
        auth_credentials=REDACTED if config.credentials_sealed else "",
    )


def _unsealed_or_blank(config: PushConfig | PendingPushConfig, sealed: str, what: str) -> str:
    # A secret sealed under a key the operator has since dropped is gone; the config is still
    # the caller's to read and delete.
    try:
        return unseal(sealed)
    except Unsealable:
        log.warning(
            "push config %s: its %s cannot be decrypted with PUSH_CREDENTIALS_KEY; shown blank", config.pk, what
        )
        return ""


def config_for_caller(*, agent: Agent, principal: Principal, task_id: str, config_id: str) -> PushConfigView:
    task = _task_for_caller(agent=agent, principal=principal, task_id=task_id)
    config = PushConfig.objects.filter(task=task, config_id=config_id, deleted_at__isnull=True).first()
    if config is None:
        # A2A has no code of its own for a missing config: it is reported like a missing task.
        raise TaskNotFound(f"push notification config {config_id!r} not found on task {task_id}")
    return config_view(config, task=task)


def _page_token(pk: int) -> str:
    return base64.urlsafe_b64encode(f"pc|{pk}".encode()).decode().rstrip("=")


def _after_pk(token: str) -> int:
    try:
        kind, pk = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode().split("|", 1)
        if kind != "pc":
            raise ValueError(kind)
        return int(pk)
    except (ValueError, UnicodeDecodeError):
        raise InvalidParams("pageToken is not a token this server issued") from None


def configs_for_caller(
    *, agent: Agent, principal: Principal, task_id: str, page_size: int = 100, page_token: str = ""
) -> tuple[list[PushConfigView], str]:
    """One page of the task's configs, oldest first: (configs, next page token or "")."""
    task = _task_for_caller(agent=agent, principal=principal, task_id=task_id)
    configs = PushConfig.objects.filter(task=task, deleted_at__isnull=True).order_by("pk")
    if page_token:
        configs = configs.filter(pk__gt=_after_pk(page_token))
    page = list(configs[: page_size + 1])
    next_token = _page_token(page[page_size - 1].pk) if len(page) > page_size else ""
    return [config_view(c, task=task) for c in page[:page_size]], next_token


def pending_configs_for_caller(
    *, agent: Agent, principal: Principal, client_task_id: str, config_id: str | None = None
) -> list[PushConfigView]:
    """The configs the caller registered for a task it has not started yet (AIP), oldest first."""
    found = PendingPushConfig.objects.filter(agent=agent, owner=principal.name, client_task_id=client_task_id)
    ttl = settings.PUSH_PENDING_CONFIG_TTL
    if ttl:  # an expired one is as good as swept (push.services.pending_live)
        found = found.filter(updated_at__gt=timezone.now() - timedelta(seconds=ttl))
    if config_id is not None:
        found = found.filter(config_id=config_id)
    return [
        PushConfigView(
            config_id=c.config_id,
            task_id=c.client_task_id,
            url=c.url,
            token=_unsealed_or_blank(c, c.token_sealed, "token"),
            auth_scheme=c.auth_scheme,
            auth_credentials=REDACTED if c.credentials_sealed else "",
        )
        for c in found.order_by("pk")
    ]


def live_config_pks(task_id: Any) -> list[int]:
    """The configs a new event of the task must be delivered to."""
    return list(PushConfig.objects.live().filter(task_id=task_id).values_list("pk", flat=True))


def _owed(now: datetime):
    """Live configs with events after their cursor that no job holds or waits for."""
    return PushConfig.objects.live().free(now).filter(delivered_seq__lt=F("task__last_seq"))


def configs_stalled(*, now: datetime | None = None, limit: int = 500) -> list[int]:
    """Configs owed events whose job was lost (the broker was down at enqueue, a worker was
    killed): the sweeper enqueues them again."""
    return list(_owed(now or timezone.now()).values_list("pk", flat=True)[:limit])


def config_owed(config_pk: int, *, now: datetime | None = None) -> bool:
    return _owed(now or timezone.now()).filter(pk=config_pk).exists()
