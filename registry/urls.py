"""The directory's HTML pages, under /registry/ (the REST API is registry.api, /api/registry/)."""

from django.urls import path

from . import views

app_name = "registry"

urlpatterns = [
    path("", views.directory, name="directory"),
    path("<int:pk>/", views.entry_detail, name="entry"),
    path("submit/", views.submit, name="submit"),
]
