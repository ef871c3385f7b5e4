from django.contrib import admin
from django.urls import path

from push import views as push_views
from tasks_app import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", views.healthz, name="healthz"),
    path(".well-known/jwks.json", push_views.jwks, name="push-jwks"),
    path("agents/<slug:tenant>/<slug:agent>/.well-known/agent-card.json", views.agent_card_view, name="agent-card"),
    path("agents/<slug:tenant>/<slug:agent>/", views.agent_rpc, name="agent-rpc"),
    # Clients often drop the trailing slash; a redirect would lose a POST body.
    path("agents/<slug:tenant>/<slug:agent>", views.agent_rpc),
]

handler404 = "tasks_app.views.not_found"
