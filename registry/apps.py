from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "registry"
    verbose_name = "Registry: tenants, agents, API keys"
    default_auto_field = "django.db.models.BigAutoField"
