"""The pages where a signed-in user answers the invitations to tenants addressed to them
(docs/tenancy.md, "Members"): the link an inviter passes on (/invitations/<token>/) and the
list of all of them (/invitations/). Only the invited user may use a link; anyone else, and a
link that is unknown, expired, revoked or answered, gets the same 404."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse, reverse_lazy
from django.views.decorators.http import require_http_methods

from . import selectors, services
from .models import MembershipInvitation

SIGN_IN = reverse_lazy("sign-in")


def _usable(found: MembershipInvitation | None, user: User) -> MembershipInvitation | None:
    if found is None:
        return None
    return selectors.invitations_pending_for(user).filter(pk=found.pk).first()


def _gone(request: HttpRequest) -> HttpResponse:
    return render(request, "accounts/invitation_gone.html", {"message": str(services.InvitationUnusable())}, status=404)


def _answer(request: HttpRequest, invitation: MembershipInvitation, user: User) -> HttpResponse:
    what = request.POST.get("answer")
    try:
        if what == "accept":
            services.membership_accept(invitation=invitation, user=user)
            messages.success(
                request, f"You are a member of {invitation.tenant.name} ({invitation.role}). Welcome to the admin."
            )
            return HttpResponseRedirect(reverse("admin:index"))
        if what == "decline":
            services.membership_decline(invitation=invitation, user=user)
            messages.info(request, f"You declined the invitation to {invitation.tenant.name}.")
            return HttpResponseRedirect(reverse("invitations:list"))
    except services.InvitationUnusable:
        return _gone(request)
    return render(
        request,
        "accounts/invitations.html",
        {"invitations": [invitation], "error": "Choose accept or decline."},
        status=400,
    )


@login_required(login_url=SIGN_IN)
@require_http_methods(["GET", "POST"])
def answer(request: HttpRequest, token: str) -> HttpResponse:
    """One invitation, by its link's token: shown to the invited user, who accepts or declines."""
    assert isinstance(request.user, User)
    found = _usable(selectors.invitation_by_token(token), request.user)
    if found is None:
        return _gone(request)
    if request.method == "POST":
        return _answer(request, found, request.user)
    return render(request, "accounts/invitations.html", {"invitations": [found]})


@login_required(login_url=SIGN_IN)
@require_http_methods(["GET", "POST"])
def invitations(request: HttpRequest) -> HttpResponse:
    """Every pending invitation addressed to the signed-in user, each to accept or decline."""
    assert isinstance(request.user, User)
    pending = selectors.invitations_pending_for(request.user)
    if request.method == "POST":
        chosen = request.POST.get("invitation", "")
        found = (
            pending.filter(pk=int(chosen)).first()
            if chosen.isascii() and chosen.isdigit() and len(chosen) < 10
            else None
        )
        if found is None:
            return _gone(request)
        return _answer(request, found, request.user)
    return render(request, "accounts/invitations.html", {"invitations": list(pending), "listing": True})
