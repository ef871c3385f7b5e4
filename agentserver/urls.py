from django.contrib import admin
from django.urls import path

from protocols import views
from push import views as push_views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", views.healthz, name="healthz"),
    path(".well-known/jwks.json", push_views.jwks, name="push-jwks"),
    path("agents/<slug:tenant>/<slug:agent>/.well-known/agent-card.json", views.agent_card_view, name="agent-card"),
    # Any segment reaches the endpoint (as under daphne, agentserver/asgi.py), which answers
    # in JSON-RPC that nothing is there: a client of the endpoint parses JSON-RPC.
    path("agents/<str:tenant>/<str:agent>/", views.agent_rpc, name="agent-rpc"),
    # Clients often drop the trailing slash; a redirect would lose a POST body.
    path("agents/<str:tenant>/<str:agent>", views.agent_rpc),
]

handler404 = "protocols.views.not_found"
