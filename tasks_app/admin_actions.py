"""The task list's bulk actions: cancel with a reason, re-dispatch stuck runs, export as JSON.

Each is the task page's button (tasks_app.admin_detail) for every selected task: the same
services (`services.task_cancel_as_operator`, `services.task_redispatch_as_operator`, which the
tenant API calls too; `exports.task_export`), the same rule for who may (operators and owners of
the task's tenant, and superusers: a member acts only on the tasks of the tenants they operate,
and is told how many of the selection were left alone) and the same entry in the admin log, one
per task. A selection of more than BULK_MAX tasks is refused, saying so: "select all" on a
million tasks would hold one request for as long as it takes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.http import content_disposition_header

from accounts import storable
from accounts.admin_scoping import is_superuser
from accounts.models import Role

from . import exports, services
from .errors import TaskNotCancelable, TaskNotFound
from .lifecycle import TERMINAL
from .models import Task

BULK_MAX = 500
REASON_MAX = 500


def cancel_reason(typed: str | None) -> str:
    """What an operator typed as a cancel's reason, as the tasks' clients will read it: trimmed,
    cut to REASON_MAX characters, the default when empty. storable.Refused, saying why, for text
    the store cannot hold (a NUL, a lone surrogate)."""
    reason = (typed or "").strip()[:REASON_MAX] or services.OPERATOR_CANCEL_REASON
    return storable.check_text(reason, where="the reason", max_length=REASON_MAX)


def _tasks(count: int) -> str:
    return f"{count} task{'' if count == 1 else 's'}"


class TaskBulkActions:
    """The list's actions; mixed into TaskAdmin (a TenantScopedAdmin)."""

    # Provided by the ModelAdmin (TenantScopedAdmin) this is mixed into.
    admin_site: Any
    opts: Any
    member_may: Callable[..., bool]
    may_in: Callable[..., QuerySet]
    log_change: Callable[..., Any]
    message_user: Callable[..., Any]

    actions = ("cancel_selected", "redispatch_selected", "export_selected")

    def has_act_permission(self, request: HttpRequest) -> bool:
        """Whether the actions are offered at all: to superusers and to operators of some tenant."""
        return is_superuser(request) or self.member_may(request, Role.OPERATOR)

    def _mine(self, request: HttpRequest, queryset: QuerySet) -> tuple[list[Task], int] | None:
        """The selected tasks the requester may act on, and how many others were selected; None
        (and the reason told) for a selection too large."""
        if queryset.order_by()[: BULK_MAX + 1].count() > BULK_MAX:
            self.message_user(
                request,
                f"Select at most {BULK_MAX} tasks for an action (narrow the list with its filters or search).",
                messages.ERROR,
            )
            return None
        selected = queryset.count()
        mine = list(self.may_in(request, queryset, Role.OPERATOR))
        return mine, selected - len(mine)

    def _left_alone(self, skipped: int) -> str:
        if not skipped:
            return ""
        return f" {_tasks(skipped)} left alone: you are not an operator of their tenant."

    # --- cancel

    @admin.action(description="Cancel the selected tasks (with a reason)", permissions=["act"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        found = self._mine(request, queryset)
        if found is None:
            return None
        mine, skipped = found
        if request.POST.get("confirm") != "yes":
            return self._confirm_cancel(request, mine, skipped)
        # The reason reaches each task's client (AIP shows it); who canceled is in the admin's log.
        try:
            reason = cancel_reason(request.POST.get("reason"))
        except storable.Refused as exc:
            self.message_user(request, f"Nothing was canceled: {exc}.", messages.ERROR)
            return None
        canceled, finished = 0, 0
        for task in mine:
            try:
                services.task_cancel_as_operator(task_id=task.pk, reason=reason)
            except (TaskNotCancelable, TaskNotFound):
                finished += 1
                continue
            self.log_change(request, task, f"Canceled: {reason}")
            canceled += 1
        text = f"Canceled {_tasks(canceled)}; their agents, streams and push receivers are told."
        if finished:
            text += f" {_tasks(finished)} finished already, left as they were."
        self.message_user(request, text + self._left_alone(skipped), messages.SUCCESS if canceled else messages.WARNING)
        return None

    def _confirm_cancel(self, request: HttpRequest, mine: list[Task], skipped: int) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": "Cancel tasks",
            "subtitle": None,
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "tasks": [(task, task.state in TERMINAL) for task in mine],
            "cancelable": sum(1 for task in mine if task.state not in TERMINAL),
            "skipped": skipped,
            "reason_max": REASON_MAX,
            "default_reason": services.OPERATOR_CANCEL_REASON,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "action": "cancel_selected",
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/tasks_app/task/cancel_selected.html", context)

    # --- re-dispatch

    @admin.action(description="Re-dispatch the selected tasks' stuck runs", permissions=["act"])
    def redispatch_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        found = self._mine(request, queryset)
        if found is None:
            return
        mine, skipped = found
        sent, refusals = 0, []
        for task in mine:
            try:
                token = services.task_redispatch_as_operator(task_id=task.pk, time_limit=settings.AGENT_TIME_LIMIT)
            except (services.TaskNotStuck, TaskNotFound) as exc:
                refusals.append(f"{str(task.pk)[:8]}: {exc}")
                continue
            self.log_change(request, task, f"Re-dispatched (run {token}).")
            sent += 1
        text = f"Sent the runs of {_tasks(sent)} to the workers again."
        if refusals:
            text += f" {_tasks(len(refusals))} not stuck, nothing sent ({'; '.join(refusals[:3])}"
            text += ", …)." if len(refusals) > 3 else ")."
        self.message_user(request, text + self._left_alone(skipped), messages.SUCCESS if sent else messages.WARNING)

    # --- export

    @admin.action(description="Export the selected tasks as JSON", permissions=["act"])
    def export_selected(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        found = self._mine(request, queryset)
        if found is None:
            return None
        mine, skipped = found
        if not mine:
            self.message_user(request, "Nothing exported." + self._left_alone(skipped), messages.WARNING)
            return None
        documents = []
        for task in mine:
            try:
                documents.append({"id": str(task.pk), **exports.task_export(task)})
            except TaskNotFound:
                continue
            self.log_change(request, task, "Exported as JSON.")
        if skipped:  # shown on the next page: the answer is the download
            self.message_user(request, f"Exported {_tasks(len(documents))}." + self._left_alone(skipped))
        now = timezone.now()
        body = {"exported_at": exports.stamp(now), "count": len(documents), "tasks": documents}
        text = json.dumps(body, ensure_ascii=False, default=str, indent=1)
        response = HttpResponse(text, content_type="application/json")
        name = f"tasks-{len(documents)}-{now:%Y%m%dT%H%M%SZ}.json"
        response["Content-Disposition"] = content_disposition_header(True, name)
        return response
