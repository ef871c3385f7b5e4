from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularSwaggerSplitView

from agentserver.admin_login import LockoutAdminAuthenticationForm, LockoutAuthenticationForm
from ops import views as ops_views
from protocols import routes, views
from push import views as push_views

# Password guesses at the admin are counted with the registry token endpoint's (accounts.logins).
admin.site.login_form = LockoutAdminAuthenticationForm

urlpatterns = [
    path("admin/", admin.site.urls),
    # Invited users answer their invitations signed in (membership, and staff, come after).
    path("invitations/", include("accounts.invitation_urls")),
    path(
        "sign-in/",
        LoginView.as_view(
            template_name="accounts/sign_in.html",
            authentication_form=LockoutAuthenticationForm,
            next_page="invitations:list",
        ),
        name="sign-in",
    ),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", ops_views.readyz, name="readyz"),
    path("metrics", ops_views.metrics_view, name="metrics"),
    # Before the registry's /api/ (whose last path answers anything else under /api/ with 404).
    path("api/v1/", include("tenant_api.urls")),
    # The OpenAPI document (/api/schema/, both APIs) as a page; its assets are served from here.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="registry-api:schema", title="agentserver API"),
        name="api-docs",
    ),
    path("api/", include("registry.api.urls")),
    path(".well-known/jwks.json", push_views.jwks, name="push-jwks"),
    path(".well-known/agent-card-jwks.json", views.card_jwks_view, name="card-jwks"),
    path("registry/", include("registry.urls")),
    # The site's front page is the directory: the admin's "View site" and a hosted card's
    # provider URL (this server, when the tenant names none) lead there.
    path("", RedirectView.as_view(pattern_name="registry:directory"), name="home"),
    path("", include(routes.urlpatterns)),
]

handler404 = "protocols.responses.not_found"
