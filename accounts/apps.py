from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts: tenants, members, agents, API keys"

    def ready(self) -> None:
        from . import changes
        from .models import Agent, AgentHost, ApiKey, OidcIssuer, Tenant

        changes.connect_signals(Tenant, Agent, ApiKey, OidcIssuer, AgentHost)
