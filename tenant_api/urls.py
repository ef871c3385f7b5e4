"""The tenant API's paths, included under /api/v1/ by agentserver.urls."""

from django.urls import path, re_path

from . import views, views_agents, views_groups, views_hosts, views_tasks
from .errors import not_found

app_name = "tenant-api"

T = "tenants/<slug:slug>/"

urlpatterns = [
    path(T, views.TenantDetailView.as_view(), name="tenant"),
    path(f"{T}members/", views.MembersView.as_view(), name="members"),
    path(f"{T}members/<str:username>/", views.MemberView.as_view(), name="member"),
    path(f"{T}invitations/", views.InvitationsView.as_view(), name="invitations"),
    path(f"{T}invitations/<int:pk>/", views.InvitationView.as_view(), name="invitation"),
    path(f"{T}keys/", views.KeysView.as_view(), name="keys"),
    # Before keys/<prefix>/: "revoke" is no prefix (12 hex digits), and must not be read as one.
    path(f"{T}keys/revoke/", views.KeysRevokeView.as_view(), name="keys-revoke"),
    path(f"{T}keys/<str:prefix>/", views.KeyView.as_view(), name="key"),
    path(f"{T}issuer/", views.IssuerView.as_view(), name="issuer"),
    path(f"{T}agents/", views_agents.AgentsView.as_view(), name="agents"),
    path(f"{T}agents/<slug:agent>/", views_agents.AgentView.as_view(), name="agent"),
    path(f"{T}agents/<slug:agent>/hosts/", views_hosts.HostsView.as_view(), name="agent-hosts"),
    path(f"{T}agents/<slug:agent>/hosts/<str:host>/", views_hosts.HostView.as_view(), name="agent-host"),
    path(
        f"{T}agents/<slug:agent>/hosts/<str:host>/verify/",
        views_hosts.HostVerifyView.as_view(),
        name="agent-host-verify",
    ),
    path(f"{T}tasks/", views_tasks.TasksView.as_view(), name="tasks"),
    path(f"{T}tasks/<str:task_id>/", views_tasks.TaskView.as_view(), name="task"),
    path(f"{T}tasks/<str:task_id>/cancel/", views_tasks.TaskCancelView.as_view(), name="task-cancel"),
    path(f"{T}tasks/<str:task_id>/redispatch/", views_tasks.TaskRedispatchView.as_view(), name="task-redispatch"),
    path(
        f"{T}tasks/<str:task_id>/files/<str:source>/<int:ref>/<int:index>/",
        views_tasks.TaskFileView.as_view(),
        name="task-file",
    ),
    path(f"{T}push-configs/", views_tasks.PushConfigsView.as_view(), name="push-configs"),
    path(f"{T}push-configs/<int:pk>/", views_tasks.PushConfigView.as_view(), name="push-config"),
    path(f"{T}deliveries/", views_tasks.DeliveriesView.as_view(), name="deliveries"),
    path(f"{T}deliveries/<int:pk>/", views_tasks.DeliveryView.as_view(), name="delivery"),
    path(f"{T}deliveries/<int:pk>/retry/", views_tasks.DeliveryRetryView.as_view(), name="delivery-retry"),
    path(f"{T}group-memberships/", views_groups.GroupMembershipsView.as_view(), name="group-memberships"),
    path(f"{T}group-memberships/<int:pk>/", views_groups.GroupMembershipView.as_view(), name="group-membership"),
    # Anything else under /api/v1/ (a path segment with a newline too): a 404 in JSON.
    re_path(r"^(?P<path>(?s:.*))$", not_found),
]
