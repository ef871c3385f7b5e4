"""The directory's HTML pages, under /registry/ (the REST API is registry.api, /api/registry/)."""

from django.urls import path

from . import attestation_views, views

app_name = "registry"

urlpatterns = [
    path("", views.directory, name="directory"),
    path("<int:pk>/", views.entry_detail, name="entry"),
    path("submit/", views.submit, name="submit"),
    path("jwks.json", attestation_views.jwks, name="jwks"),
    path("<int:pk>/attestation.jwt", attestation_views.entry_attestation, name="attestation"),
    path("attestations/<str:jti>/", attestation_views.attestation_status, name="attestation-status"),
]
