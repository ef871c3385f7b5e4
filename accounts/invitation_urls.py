"""The invited user's pages (accounts.invitation_views), under /invitations/."""

from django.urls import path

from . import invitation_views

app_name = "invitations"

urlpatterns = [
    path("", invitation_views.invitations, name="list"),
    path("<str:token>/", invitation_views.answer, name="answer"),
]
