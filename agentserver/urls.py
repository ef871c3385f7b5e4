from django.contrib import admin
from django.urls import include, path

from agentserver.admin_login import LockoutAdminAuthenticationForm
from ops import views as ops_views
from protocols import routes, views
from push import views as push_views

# Password guesses at the admin are counted with the registry token endpoint's (accounts.logins).
admin.site.login_form = LockoutAdminAuthenticationForm

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", ops_views.readyz, name="readyz"),
    path("metrics", ops_views.metrics_view, name="metrics"),
    path("api/", include("registry.api.urls")),
    path(".well-known/jwks.json", push_views.jwks, name="push-jwks"),
    path("registry/", include("registry.urls")),
    path("", include(routes.urlpatterns)),
]

handler404 = "protocols.views.not_found"
