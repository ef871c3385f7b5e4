"""The REST API's paths, included under /api/ by agentserver.urls."""

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView

from . import views
from .errors import not_found

app_name = "registry-api"

urlpatterns = [
    path("registry/agents/", views.AgentsView.as_view(), name="agents"),
    path("registry/agents/<int:pk>/", views.AgentView.as_view(), name="agent-detail"),
    path("registry/agents/<int:pk>/versions/<int:number>/", views.VersionView.as_view(), name="agent-version"),
    path("registry/agents/<int:pk>/verify/", views.VerifyView.as_view(), name="agent-verify"),
    path("registry/agents/<int:pk>/transition/", views.TransitionView.as_view(), name="agent-transition"),
    path("registry/agents/<int:pk>/flag/", views.FlagView.as_view(), name="agent-flag"),
    path("registry/agents/<int:pk>/attestation/", views.AttestationView.as_view(), name="agent-attestation"),
    path("registry/token/", views.TokenView.as_view(), name="token"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # Anything else under /api/: a 404 in JSON, as every other answer of the API (a path with a
    # newline in it too: `.` alone would not match one, and Django would answer its HTML page).
    re_path(r"^(?P<path>[\s\S]*)$", not_found),
]
