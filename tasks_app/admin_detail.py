"""The admin's task page, its actions and the overview: `TaskDetailAdmin`, which `TaskAdmin`
inherits first.

- The task page (the change view, read-only for everyone): the timeline of the task's event
  log with the user messages interleaved, paged by `?timeline_page=`; each part by its kind;
  the task as its own dialect encodes it; its context's and its references' tasks; the
  failure reason; and the sections the apps above the store add (push: configs, deliveries,
  attempts). Its query count does not depend on how many events, messages or artifacts it shows.
- The actions (POST, CSRF, each in the admin log; operators, owners and superusers): cancel
  (`services.task_cancel_as_operator`, the client's cancel flow), re-dispatch a stuck run
  (`services.task_redispatch_as_operator`, what the sweeper does), export as JSON
  (`exports.task_export`); the tenant API offers the first two through the same services, and
  the task list the three as bulk actions (tasks_app.admin_actions). An action's address
  opened as a page leads back to the task's page.
- A file part's stored bytes, as a download (anyone who may see the task; `selectors.task_file`,
  which the tenant API serves too).
- The overview (`overview/`): counts by state, stuck tasks, busiest agents, the broker's queue
  depth (superusers only: the queue is every tenant's), and the sections above the store add
  (push: failing endpoints).

The store's admin must not import the apps above it (push, protocols): they add sections
through `add_task_section` / `add_overview_section`, and dialects encode through `encoders`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.http import content_disposition_header

from accounts import storable
from accounts.admin_scoping import is_superuser, tenant_ids_with
from accounts.models import Agent, Role

from . import admin_actions, encoders, exports, selectors, services
from .errors import TaskNotCancelable, TaskNotFound
from .exports import stamp
from .lifecycle import TERMINAL, EventKind, TaskState
from .models import Task

TIMELINE_PAGE_SIZE = 200
# Larger encodings are not inlined in the page: the export has them.
RAW_JSON_INLINE_LIMIT = 200_000


# --- sections the apps above the store add -------------------------------------------------


@dataclass
class Table:
    headers: list[str]
    # A cell is text, or (text, url) for a link.
    rows: list[list[Any]]
    caption: str = ""

    @property
    def cells(self) -> list[list[dict[str, Any]]]:
        """The rows as the template shows them: each cell a text and, for a link, a URL."""
        return [[_cell(value) for value in row] for row in self.rows]


def _cell(value: Any) -> dict[str, Any]:
    if isinstance(value, tuple) and len(value) == 2:
        return {"text": value[0], "url": value[1]}
    return {"text": "" if value is None else value, "url": ""}


@dataclass
class Section:
    title: str
    tables: list[Table] = field(default_factory=list)
    note: str = ""
    links: list[tuple[str, str]] = field(default_factory=list)  # (text, url)


# (request, task, tenant ids the member may see or None for all) -> a section, or None
TaskSection = Callable[[HttpRequest, Task], Section | None]
# (request, tenant ids or None, now) -> a section
OverviewSection = Callable[[HttpRequest, list[int] | None, datetime], Section | None]

_task_sections: list[TaskSection] = []
_overview_sections: list[OverviewSection] = []


def add_task_section(section: TaskSection) -> TaskSection:
    """Show a section on every task page (once; adding it again changes nothing). Its queries
    must not grow with the task's size."""
    if section not in _task_sections:
        _task_sections.append(section)
    return section


def add_overview_section(section: OverviewSection) -> OverviewSection:
    """Show a section on the overview (once). Its queries must each be served by an index."""
    if section not in _overview_sections:
        _overview_sections.append(section)
    return section


# --- presentation --------------------------------------------------------------------------


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _byte_size(b64: str) -> int | None:
    try:
        return len(base64.b64decode(b64, validate=True))
    except (binascii.Error, ValueError):
        return None


def _is_web_url(uri: str) -> bool:
    return uri.lower().startswith(("http://", "https://"))


def render_part(part: Any, download: str) -> dict[str, Any]:
    """A canonical part (tasks_app.parts) as the template shows it. `download`: the URL of its
    stored bytes, for a file part that has them."""
    if not isinstance(part, dict):
        return {"kind": "unknown", "json": pretty(part)}
    shown: dict[str, Any] = {"kind": part.get("type", "unknown")}
    if part.get("metadata"):
        shown["metadata"] = pretty(part["metadata"])
    kind = shown["kind"]
    if kind == "text":
        shown["text"] = str(part.get("text", ""))
    elif kind == "data":
        shown["json"] = pretty(part.get("data"))
    elif kind == "file":
        shown["name"] = str(part.get("name") or "")
        shown["media_type"] = str(part.get("media_type") or "")
        if isinstance(part.get("bytes"), str):
            shown["size"] = _byte_size(part["bytes"])
            shown["download"] = download
        else:
            uri = str(part.get("uri") or "")
            shown["uri"] = uri
            shown["link"] = _is_web_url(uri)
    else:
        shown["kind"] = "unknown"
        shown["json"] = pretty(part)
    return shown


def _state_shown(task: Task, state: str) -> str:
    """The stored state, and the name the task's dialect gives it where that differs (an AIP
    task's submitted is its Leader's "accepted")."""
    named = encoders.state_name(task.dialect, state)
    return state if named == state else f"{state} ({task.get_dialect_display()}: {named})"


def _queue_depth() -> int | None:
    """Runs waiting in the broker's queue (Celery's Redis list and its priority lists); None when
    the broker is not Redis or does not answer."""
    url = settings.CELERY_BROKER_URL
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return None
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    # kombu keeps priority 0 in the queue's own key, the others under <queue>\x06\x16<priority>.
    keys = [queue, *(f"{queue}\x06\x16{p}" for p in (3, 6, 9))]
    try:
        client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        try:
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.llen(key)
            return sum(int(n) for n in pipe.execute())
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return None


# --- the admin -----------------------------------------------------------------------------


class TaskDetailAdmin:
    """The task page, its actions and the overview; mixed into TaskAdmin (a TenantScopedAdmin)."""

    # Provided by the ModelAdmin (TenantScopedAdmin) this is mixed into.
    admin_site: Any
    opts: Any
    get_object: Callable[..., Any]
    has_view_permission: Callable[..., bool]
    member_may: Callable[..., bool]
    log_change: Callable[..., Any]
    message_user: Callable[..., Any]

    timeline_page_size = TIMELINE_PAGE_SIZE

    # --- urls

    def _url_name(self, what: str) -> str:
        return f"{self.opts.app_label}_{self.opts.model_name}_{what}"

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        mine = [
            path("overview/", wrap(self.overview_view), name=self._url_name("overview")),
            path("<path:object_id>/cancel/", wrap(self.cancel_view), name=self._url_name("cancel")),
            path("<path:object_id>/redispatch/", wrap(self.redispatch_view), name=self._url_name("redispatch")),
            path("<path:object_id>/export/", wrap(self.export_view), name=self._url_name("export")),
            path(
                "<path:object_id>/file/<str:source>/<int:ref>/<int:index>/",
                wrap(self.file_view),
                name=self._url_name("file"),
            ),
        ]
        return mine + super().get_urls()  # type: ignore[misc]

    def _url(self, what: str, *args: Any) -> str:
        return reverse(f"admin:{self._url_name(what)}", args=args, current_app=self.admin_site.name)

    # --- who may

    def _visible_task(self, request: HttpRequest, object_id: str) -> Task:
        """The task, if the requester may see it; another tenant's answers 404 like a missing one."""
        task = self.get_object(request, object_id)  # scoped; Http404 for what is not theirs
        if not self.has_view_permission(request, task):
            raise Http404("No such object.")
        return task

    def may_act(self, request: HttpRequest, task: Task | None = None) -> bool:
        """Cancel, re-dispatch, export: operators and owners of the task's tenant, superusers."""
        if is_superuser(request):
            return True
        return self.member_may(request, Role.OPERATOR, task.tenant_id if task is not None else None)

    def _acting_on(self, request: HttpRequest, object_id: str) -> Task:
        task = self._visible_task(request, object_id)
        if not self.may_act(request, task):
            raise PermissionDenied
        return task

    def _not_posted(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse | None:
        """An action is a POST (its button on the task's page). Its address opened as a page (a
        link followed, a bookmark, a URL typed) leads back to the task's page, saying so; another
        method is 405. None for a POST."""
        if request.method == "POST":
            return None
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["POST"])
        task = self._visible_task(request, object_id)  # another tenant's task: 404, as one that does not exist
        said = f"{action} is done with its button on this page: opening its address changes nothing."
        self.message_user(request, said, messages.INFO)
        return self._back(task)

    def _back(self, task: Task) -> HttpResponseRedirect:
        return HttpResponseRedirect(self._url("change", task.pk))

    # --- the task page

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        task = self._visible_task(request, object_id)
        if request.method not in ("GET", "HEAD"):
            raise PermissionDenied  # nobody edits history in the admin
        task.agent = Agent.objects.select_related("tenant").get(pk=task.agent_id)  # one query, not two
        try:
            page = int(request.GET.get("timeline_page", "1"))
        except ValueError:
            page = 1
        timeline = selectors.task_timeline(task, page=page, per_page=self.timeline_page_size)
        tenant_ids = None if is_superuser(request) else tenant_ids_with(request, Role.VIEWER)
        related = selectors.task_related(task, tenant_ids=tenant_ids)
        # A task of more than one timeline page is not read whole for the page: the export has it.
        if task.last_seq <= self.timeline_page_size:
            try:
                encoded, encoded_as = exports.dialect_encoding(task)
            except TaskNotFound:
                raise Http404("No such object.") from None
            raw = pretty(encoded)
        else:
            encoded_as, raw = "", ""
        sections = [s for s in (section(request, task) for section in _task_sections) if s is not None]
        context = {
            **self.admin_site.each_context(request),
            "title": f"Task {task.pk}",
            "subtitle": None,
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "original": task,
            "task": task,
            "has_view_permission": True,
            "fields": self._task_fields(task),
            "metadata": pretty(task.metadata) if task.metadata else "",
            # What the executor keeps between runs (a fronted agent's upstream task id): for
            # operators tracing a run to its upstream; clients never see it.
            "executor_state": pretty(task.executor_state) if task.executor_state else "",
            "failure_reason": selectors.failure_reason(task) if task.state == TaskState.FAILED else "",
            "timeline": self._timeline_entries(task, timeline),
            "timeline_page": timeline.page,
            "timeline_pages": timeline.pages,
            "timeline_page_links": self._page_links(timeline),
            "context_tasks": [(r, self._url("change", r.pk)) for r in related if r.same_context],
            "referenced_tasks": [(r, self._url("change", r.pk)) for r in related if r.referenced],
            "raw_json": raw if len(raw) <= RAW_JSON_INLINE_LIMIT else "",
            "raw_json_size": len(raw),
            "raw_json_as": encoded_as or "the task as its dialect encodes it",
            "sections": sections,
            "may_act": self.may_act(request, task),
            "may_cancel": task.state not in TERMINAL,
            "may_redispatch": self._stuck(task),
            "cancel_url": self._url("cancel", task.pk),
            "redispatch_url": self._url("redispatch", task.pk),
            "export_url": self._url("export", task.pk),
            "overview_url": self._url("overview"),
            "history_url": self._url("history", task.pk),
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/tasks_app/task/detail.html", context)

    def _task_fields(self, task: Task) -> list[tuple[str, Any]]:
        return [
            ("id", task.pk),
            ("tenant", task.agent.tenant),
            ("agent", task.agent),
            ("owner", task.owner),
            ("dialect", task.get_dialect_display()),
            ("state", _state_shown(task, task.state)),
            ("failure", task.get_failure_display() if task.failure else ""),
            ("context id", task.context_id),
            ("client task id", task.client_task_id or ""),
            ("status timestamp", stamp(task.status_timestamp)),
            ("created", stamp(task.created_at)),
            ("updated", stamp(task.updated_at)),
            ("reply only", task.reply_only),
            ("events (last seq)", task.last_seq),
            ("run requested", stamp(task.run_requested_at)),
            ("run claimed", stamp(task.run_claimed_at)),
            ("run retries", task.run_retries),
            ("accepted output modes", ", ".join(map(str, task.accepted_output_modes or []))),
            ("has push configs", task.has_push_configs),
        ]

    def _stuck(self, task: Task) -> bool:
        """A run no worker claimed, or one claimed longer ago than the agents' time limit."""
        return selectors.redispatch_refusal(task, time_limit=settings.AGENT_TIME_LIMIT) is None

    def _page_links(self, timeline: selectors.Timeline) -> list[tuple[str, str]]:
        if timeline.pages == 1:
            return []
        wanted = {1, timeline.page - 1, timeline.page + 1, timeline.pages}
        return [(str(n), f"?timeline_page={n}") for n in sorted(wanted) if 1 <= n <= timeline.pages]

    def _parts(self, task: Task, parts: Any, source: str, ref: int) -> list[dict[str, Any]]:
        if not isinstance(parts, list):
            return []
        return [render_part(part, self._url("file", task.pk, source, ref, i)) for i, part in enumerate(parts)]

    def _timeline_entries(self, task: Task, timeline: selectors.Timeline) -> list[dict[str, Any]]:
        entries: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        for m in timeline.messages:
            entry = {
                "kind": "message",
                "at": stamp(m.created_at),
                "seq": None,
                "role": m.role,
                "message_id": m.message_id,
                "parts": self._parts(task, m.parts, "message", m.pk),
                "references": m.reference_task_ids or [],
                "command": m.command,
            }
            entries.append(((m.created_at, 0, m.pk), entry))
        for e in timeline.events:
            payload = e.payload if isinstance(e.payload, dict) else {}
            entry = {"kind": e.kind, "at": stamp(e.created_at), "seq": e.seq}
            if e.kind == EventKind.STATUS:
                message = payload.get("message") or {}
                entry.update(
                    state=_state_shown(task, payload.get("state", "")),
                    reason=payload.get("reason", ""),
                    status_at=payload.get("timestamp", ""),
                    parts=self._parts(task, message.get("parts"), "event", e.seq),
                )
            elif e.kind == EventKind.ARTIFACT:
                artifact = payload.get("artifact") or {}
                entry.update(
                    artifact_id=artifact.get("artifact_id", ""),
                    name=artifact.get("name", ""),
                    description=artifact.get("description", ""),
                    append=bool(payload.get("append")),
                    last_chunk=bool(payload.get("last_chunk")),
                    parts=self._parts(task, artifact.get("parts"), "event", e.seq),
                )
            else:
                message = payload.get("message") or {}
                entry.update(
                    role=message.get("role", ""), parts=self._parts(task, message.get("parts"), "event", e.seq)
                )
            entries.append(((e.created_at, 1, e.seq), entry))
        entries.sort(key=lambda pair: pair[0])
        return [entry for _, entry in entries]

    # --- the actions

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if (answer := self._not_posted(request, object_id, "Cancel")) is not None:
            return answer
        task = self._acting_on(request, object_id)
        # The reason reaches the task's client (AIP shows it); who canceled is in the admin's log.
        try:
            reason = admin_actions.cancel_reason(request.POST.get("reason"))
        except storable.Refused as exc:
            self.message_user(request, f"The task was not canceled: {exc}.", messages.ERROR)
            return self._back(task)
        try:
            services.task_cancel_as_operator(task_id=task.pk, reason=reason)
        except (TaskNotCancelable, TaskNotFound) as exc:
            self.message_user(request, str(exc), messages.WARNING)
            return self._back(task)
        self.log_change(request, task, f"Canceled: {reason}")
        self.message_user(request, "Task canceled; the agent, its streams and its push receivers are told.")
        return self._back(task)

    def redispatch_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if (answer := self._not_posted(request, object_id, "Re-dispatch")) is not None:
            return answer
        task = self._acting_on(request, object_id)
        try:
            token = services.task_redispatch_as_operator(task_id=task.pk, time_limit=settings.AGENT_TIME_LIMIT)
        except (services.TaskNotStuck, TaskNotFound) as exc:
            self.message_user(request, f"The task is not stuck: {exc}. Nothing was sent again.", messages.WARNING)
            return self._back(task)
        self.log_change(request, task, f"Re-dispatched (run {token}).")
        self.message_user(request, "The task's run was sent to the workers again.")
        return self._back(task)

    def export_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if (answer := self._not_posted(request, object_id, "Export")) is not None:
            return answer
        task = self._acting_on(request, object_id)
        try:
            document = exports.task_export(task)
        except TaskNotFound:
            raise Http404("No such object.") from None
        self.log_change(request, task, "Exported as JSON.")
        response = HttpResponse(
            json.dumps(document, ensure_ascii=False, default=str, indent=1), content_type="application/json"
        )
        response["Content-Disposition"] = content_disposition_header(True, f"task-{task.pk}.json")
        return response

    def file_view(self, request: HttpRequest, object_id: str, source: str, ref: int, index: int) -> HttpResponse:
        task = self._visible_task(request, object_id)
        found = selectors.task_file(task, source=source, ref=ref, index=index)
        if found is None:
            raise Http404("No such file.")
        response = HttpResponse(found.content, content_type=found.media_type)
        response["Content-Disposition"] = content_disposition_header(True, found.name)
        response["X-Content-Type-Options"] = "nosniff"
        return response

    # --- the overview

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        superuser = is_superuser(request)
        if superuser:
            if not self.has_view_permission(request):
                raise PermissionDenied
            tenant_ids = None
        else:
            tenant_ids = tenant_ids_with(request, Role.VIEWER)
            if not tenant_ids:
                raise PermissionDenied
        now = timezone.now()
        overview = selectors.tasks_overview(
            tenant_ids=tenant_ids,
            now=now,
            time_limit=settings.AGENT_TIME_LIMIT,
            unclaimed_after=settings.SWEEP_UNCLAIMED_AFTER,
        )
        sections = [s for s in (section(request, tenant_ids, now) for section in _overview_sections) if s is not None]
        context = {
            **self.admin_site.each_context(request),
            "title": "Tasks: overview",
            "subtitle": None,
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "has_view_permission": True,
            "now": stamp(now),
            "by_state": overview.by_state,
            "totals": (sum(h for _, h, _ in overview.by_state), sum(d for _, _, d in overview.by_state)),
            "busiest": overview.busiest,
            "stuck_claimed": [
                (pk, state, stamp(at), self._url("change", pk)) for pk, state, at in overview.stuck_claimed
            ],
            "stuck_unclaimed": [
                (pk, state, stamp(at), self._url("change", pk)) for pk, state, at in overview.stuck_unclaimed
            ],
            "time_limit": settings.AGENT_TIME_LIMIT,
            "unclaimed_after": settings.SWEEP_UNCLAIMED_AFTER,
            # The broker's queue is every tenant's: its depth is the site's, for superusers.
            "show_queue": superuser,
            "queue": settings.CELERY_TASK_DEFAULT_QUEUE if superuser else None,
            "queue_depth": _queue_depth() if superuser else None,
            "sections": sections,
            "changelist_url": self._url("changelist"),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/tasks_app/task/overview.html", context)
