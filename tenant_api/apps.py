from django.apps import AppConfig


class TenantApiConfig(AppConfig):
    name = "tenant_api"
    verbose_name = "Tenant API"
