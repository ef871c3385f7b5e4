"""The sign-in forms (the admin's, and the one invited users sign in with at /sign-in/), with
the lockout the registry's token endpoint has too (accounts.logins): a username or an address
that failed too often is refused for a while, whatever the password, with a message saying so."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from accounts import logins


class LockoutMixin:
    request: Any
    cleaned_data: dict[str, Any]
    user_cache: Any

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is None or not password:
            return super().clean()  # type: ignore[misc]
        address = logins.client_address(self.request) if self.request is not None else ""
        lock = logins.locked(username=username, address=address)
        if lock is not None:
            raise ValidationError(lock.message, code="locked_out")
        try:
            cleaned = super().clean()  # type: ignore[misc]
        except ValidationError as exc:
            if exc.code == "invalid_login" and self.user_cache is None:
                lock = logins.failed(username=username, address=address)
                if lock is not None:
                    raise ValidationError(lock.message, code="locked_out") from None
            raise
        logins.succeeded(username=username)
        return cleaned


class LockoutAdminAuthenticationForm(LockoutMixin, AdminAuthenticationForm):
    pass


class LockoutAuthenticationForm(LockoutMixin, AuthenticationForm):
    """Any active user's sign-in (not only staff's): an invited user answers their invitation
    before membership makes them staff."""
