"""The tenant's tasks (the admin's list, filters and search; a task with its timeline and its
files; cancel, re-dispatch), its tasks' push configs (read, delete) and the delivery log (read,
retry a dead delivery).

Viewers read; operators cancel, re-dispatch, delete configs and retry deliveries, through the
services the admin's actions use (tasks_app.services.task_cancel_as_operator and
task_redispatch_as_operator, push.services); a file is the admin's download
(tasks_app.selectors.task_file)."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.http import HttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import Role
from push import services as push_services
from push.models import DeliveryState, PushAttempt
from tasks_app import selectors as task_selectors
from tasks_app import services as task_services
from tasks_app.errors import TaskNotCancelable, TaskNotFound

from . import represent, selectors
from . import serializers as s
from .base import TenantView, errors, missing, next_link, page_or_400, query, valid
from .errors import Conflict

log = logging.getLogger(__name__)

TAG = "tenant tasks"
TIMELINE_PAGE_SIZE = 200
OPERATOR_WRITES = {"POST": Role.OPERATOR, "DELETE": Role.OPERATOR}


class TasksView(TenantView):
    @extend_schema(
        operation_id="tenant_tasks_list",
        tags=[TAG],
        summary="The tenant's tasks",
        description="Newest change first, a page at a time (follow `next`). The admin's filters (agent, state, "
        "dialect, owner, when last changed) and search (`q`: a task, context or message id exactly, or words of "
        "a message's text).",
        parameters=[s.TaskQuery],
        responses={200: s.TasksOut, **errors(400)},
    )
    def get(self, request: Request, slug: str) -> Response:
        v = query(s.TaskQuery, request, repeated=("state",))
        found = selectors.TaskFilter(
            agent=v.get("agent"),
            states=tuple(v.get("state") or ()),
            dialect=v.get("dialect"),
            owner=v.get("owner"),
            changed_after=v.get("changed_after"),
            changed_before=v.get("changed_before"),
            q=v.get("q"),
        )
        tenant = self.tenant(request)
        page = page_or_400(lambda: selectors.task_page(tenant, found, cursor=v.get("cursor"), size=v["page_size"]))
        body = {"results": [represent.task(t) for t in page.items], "next": next_link(request, page)}
        return Response(s.TasksOut(body).data)


class TaskView(TenantView):
    def _task(self, request: Request, task_id: str):  # type: ignore[no-untyped-def]
        found = selectors.task_of(self.tenant(request), task_id)
        if found is None:
            raise missing("task")
        return found

    @extend_schema(
        operation_id="tenant_tasks_retrieve",
        tags=[TAG],
        summary="A task with its timeline",
        description="Its events and the user messages between them, oldest first, "
        f"{TIMELINE_PAGE_SIZE} events a page (`timeline_page`); a failure's kind, status code and the "
        "client's text, and for operators and owners the server's full reason (quoting the endpoint's answer).",
        parameters=[s.TaskDetailQuery],
        responses={200: s.TaskDetailOut, **errors(400)},
    )
    def get(self, request: Request, slug: str, task_id: str) -> Response:
        task = self._task(request, task_id)
        v = query(s.TaskDetailQuery, request)
        timeline = task_selectors.task_timeline(task, page=v["timeline_page"], per_page=TIMELINE_PAGE_SIZE)
        # The server's reasons quote what endpoints answered (a webhook's error body): operators'.
        reasons = self.manager(request).may(Role.OPERATOR)
        body: dict[str, Any] = {
            **represent.task(task),
            **represent.failure(task_selectors.failure_shown(task), reasons=reasons),
            "metadata": task.metadata,
            "timeline": represent.timeline(timeline, reasons=reasons),
            "timeline_page": timeline.page,
            "timeline_pages": timeline.pages,
        }
        return Response(s.TaskDetailOut(body).data)


class TaskCancelView(TenantView):
    roles = OPERATOR_WRITES

    @extend_schema(
        operation_id="tenant_tasks_cancel",
        tags=[TAG],
        summary="Cancel a task (operators)",
        description="The admin's cancel: the agent notices on its next step, streams and push receivers hear "
        "the canceled status. 409 when the task is finished already.",
        request=s.CancelIn,
        responses={200: s.TaskOut, **errors(400, 409, 413, 429)},
    )
    def post(self, request: Request, slug: str, task_id: str) -> Response:
        task = selectors.task_of(self.tenant(request), task_id)
        if task is None:
            raise missing("task")
        v = valid(s.CancelIn, request.data if request._request.body else {})
        # The reason reaches the task's client (AIP shows it): without one, not the key's name.
        reason = (v.get("reason") or "").strip() or task_services.OPERATOR_CANCEL_REASON
        try:
            task_services.task_cancel_as_operator(task_id=task.pk, reason=reason)
        except TaskNotCancelable as exc:
            raise Conflict(str(exc)) from None
        except TaskNotFound:
            raise missing("task") from None
        # Who canceled is the operator's to know, in the log (the admin keeps it in its own).
        log.info("task %s canceled through the tenant API by %s", task.pk, self.manager(request).name)
        task.refresh_from_db()
        return Response(s.TaskOut(represent.task(task)).data)


class TaskRedispatchView(TenantView):
    roles = OPERATOR_WRITES

    @extend_schema(
        operation_id="tenant_tasks_redispatch",
        tags=[TAG],
        summary="Re-dispatch a stuck run (operators)",
        description="The admin's re-dispatch, what the sweeper does: a run no worker claimed is sent to the "
        "workers again; one claimed longer ago than the agents' time limit (its worker lost) gets a fresh token "
        "and is sent again. 409, saying why, when there is nothing to send (the task is finished or waits for "
        "its client, or its run is within its time). No body is read.",
        request=None,
        responses={200: s.TaskOut, **errors(409, 429)},
    )
    def post(self, request: Request, slug: str, task_id: str) -> Response:
        task = selectors.task_of(self.tenant(request), task_id)
        if task is None:
            raise missing("task")
        try:
            token = task_services.task_redispatch_as_operator(task_id=task.pk, time_limit=settings.AGENT_TIME_LIMIT)
        except task_services.TaskNotStuck as exc:
            raise Conflict(f"nothing to re-dispatch: {exc}") from None
        except TaskNotFound:
            raise missing("task") from None
        log.info(
            "task %s re-dispatched (run %s) through the tenant API by %s", task.pk, token, self.manager(request).name
        )
        task.refresh_from_db()
        return Response(s.TaskOut(represent.task(task)).data)


class TaskFileView(TenantView):
    """A file part's stored bytes, as the admin's task page offers them: an attachment, its
    media type only when plain, never sniffed."""

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # The file is what it is, whatever the client accepts; a refusal is JSON.
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        operation_id="tenant_tasks_file",
        tags=[TAG],
        summary="A file part's bytes",
        description="The part `index` (from 0) of the task's event `ref` (its `seq`, source `event`: a status "
        "message's or an artifact's parts) or of its user message `ref` (source `message`), when it is a file "
        "stored as bytes: a download (`Content-Disposition: attachment`), with the part's media type when it is "
        "a plain one (else application/octet-stream) and `X-Content-Type-Options: nosniff`. 404 for any other part.",
        parameters=[
            OpenApiParameter("source", OpenApiTypes.STR, OpenApiParameter.PATH, enum=["event", "message"]),
            OpenApiParameter("ref", OpenApiTypes.INT, OpenApiParameter.PATH),
            OpenApiParameter("index", OpenApiTypes.INT, OpenApiParameter.PATH),
        ],
        responses={
            (200, "*/*"): OpenApiResponse(OpenApiTypes.BINARY, description="The file's bytes."),
            **errors(),
        },
    )
    def get(self, request: Request, slug: str, task_id: str, source: str, ref: int, index: int) -> HttpResponse:
        task = selectors.task_of(self.tenant(request), task_id)
        found = task_selectors.task_file(task, source=source, ref=ref, index=index) if task is not None else None
        if found is None:
            raise missing("file part of this task" if task is not None else "task")
        response = HttpResponse(found.content, content_type=found.media_type)
        response["Content-Disposition"] = content_disposition_header(True, found.name)
        response["X-Content-Type-Options"] = "nosniff"
        return response


# --- push configs ---------------------------------------------------------------------------


class PushConfigsView(TenantView):
    @extend_schema(
        operation_id="tenant_push_configs_list",
        tags=[TAG],
        summary="Push configs of the tenant's tasks",
        description="Live ones, newest first; whether credentials or a token are set, never them.",
        parameters=[s.PushConfigQuery],
        responses={200: s.PushConfigsOut, **errors(400)},
    )
    def get(self, request: Request, slug: str) -> Response:
        v = query(s.PushConfigQuery, request)
        task = str(v["task"]) if v.get("task") else None
        configs = selectors.push_configs_of(self.tenant(request), task_id=task)
        page = page_or_400(
            lambda: selectors.page_by_pk(configs, cursor=v.get("cursor"), size=v["page_size"], newest_first=True)
        )
        body = {"results": [represent.push_config(c) for c in page.items], "next": next_link(request, page)}
        return Response(s.PushConfigsOut(body).data)


class PushConfigView(TenantView):
    roles = OPERATOR_WRITES

    @extend_schema(
        operation_id="tenant_push_configs_retrieve",
        tags=[TAG],
        summary="A push config",
        responses={200: s.PushConfigOut, **errors()},
    )
    def get(self, request: Request, slug: str, pk: int) -> Response:
        found = selectors.push_config_of(self.tenant(request), pk)
        if found is None:
            raise missing("push config")
        return Response(s.PushConfigOut(represent.push_config(found)).data)

    @extend_schema(
        operation_id="tenant_push_configs_delete",
        tags=[TAG],
        summary="Delete a push config (operators)",
        description="Nothing more is delivered to it; its deliveries stay in the log, its secrets go.",
        responses={204: None, **errors(429)},
    )
    def delete(self, request: Request, slug: str, pk: int) -> Response:
        if not push_services.config_delete_for_tenant(tenant_id=self.tenant(request).pk, config_pk=pk):
            raise missing("push config")
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- the delivery log -----------------------------------------------------------------------


def _delivery_detail(found: Any) -> dict[str, Any]:
    attempts = PushAttempt.objects.filter(delivery_id=found.pk).order_by("id")[:100]
    log = [
        {"started_at": a.started_at, "status_code": a.status_code, "latency_ms": a.latency_ms, "error": a.error}
        for a in attempts
    ]
    return {**represent.delivery(found), "attempt_log": log}


class DeliveriesView(TenantView):
    @extend_schema(
        operation_id="tenant_deliveries_list",
        tags=[TAG],
        summary="The push delivery log",
        description="One delivery per event and push config, newest first; by state and task.",
        parameters=[s.DeliveryQuery],
        responses={200: s.DeliveriesOut, **errors(400)},
    )
    def get(self, request: Request, slug: str) -> Response:
        v = query(s.DeliveryQuery, request)
        task = str(v["task"]) if v.get("task") else None
        deliveries = selectors.deliveries_of(self.tenant(request), state=v.get("state"), task_id=task)
        page = page_or_400(
            lambda: selectors.page_by_pk(deliveries, cursor=v.get("cursor"), size=v["page_size"], newest_first=True)
        )
        body = {"results": [represent.delivery(d) for d in page.items], "next": next_link(request, page)}
        return Response(s.DeliveriesOut(body).data)


class DeliveryView(TenantView):
    @extend_schema(
        operation_id="tenant_deliveries_retrieve",
        tags=[TAG],
        summary="A delivery with its attempts",
        responses={200: s.DeliveryDetailOut, **errors()},
    )
    def get(self, request: Request, slug: str, pk: int) -> Response:
        found = selectors.delivery_of(self.tenant(request), pk)
        if found is None:
            raise missing("delivery")
        return Response(s.DeliveryDetailOut(_delivery_detail(found)).data)


class DeliveryRetryView(TenantView):
    roles = OPERATOR_WRITES

    @extend_schema(
        operation_id="tenant_deliveries_retry",
        tags=[TAG],
        summary="Retry a dead delivery (operators)",
        description="A fresh budget of attempts; its config resumes from it. 409 when the delivery is not dead "
        "(or its config was deleted, or a later retry got past it).",
        request=None,
        responses={200: s.DeliveryDetailOut, **errors(409, 429)},
    )
    def post(self, request: Request, slug: str, pk: int) -> Response:
        tenant = self.tenant(request)
        found = selectors.delivery_of(tenant, pk)
        if found is None:
            raise missing("delivery")
        if found.state != DeliveryState.DEAD:
            raise Conflict(f"the delivery is {found.state}, not dead: nothing was sent again")
        if not push_services.deliveries_retry(delivery_pks=[found.pk]):
            raise Conflict("the delivery cannot be retried (its config was deleted, or a later retry got past it)")
        return Response(s.DeliveryDetailOut(_delivery_detail(selectors.delivery_of(tenant, pk))).data)
